//! The process's allocator: mimalloc, not glibc's malloc.
//!
//! `replay` decodes records on one thread and drops them on another. glibc pays for each such free with the
//! decoding arena's lock and, on the decoding thread, a sort of that arena's bins: a quarter of the decoding
//! thread's time in a profile, and a fifth of the whole replay's wall time (BENCHMARKS.md, "Replay across
//! two cores"). mimalloc hands a block freed elsewhere back to its page's owner without a lock.
//!
//! Two settings keep its memory as small as glibc's (a replay's peak RSS went from 55 MB to 82 MB without
//! them): no transparent huge pages for its arenas (the `no_thp` feature, Cargo.toml), and freed pages
//! returned to the OS at once rather than a second later (`MIMALLOC_PURGE_DELAY`, which still wins when set).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc v3's number for `purge_delay` (`mi_option_e` in its `mimalloc.h`; libmimalloc-sys has no
/// constant for it). The test below reads the option back by name, so a renumbering fails it.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Return freed memory to the OS at once, unless `MIMALLOC_PURGE_DELAY` says otherwise.
pub(crate) fn return_freed_memory_promptly() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        set_purge_delay(0);
    }
}

fn set_purge_delay(milliseconds: std::ffi::c_long) {
    // SAFETY: sets one of mimalloc's option values; any delay is valid (-1: never purge).
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, milliseconds) };
}

#[cfg(test)]
mod tests {
    use std::ffi::{CStr, c_char, c_void};

    unsafe extern "C" {
        /// Prints every option as `option '<name>': <value>` through `out` (mimalloc.h).
        fn mi_options_print_out(
            out: Option<unsafe extern "C" fn(*const c_char, *mut c_void)>,
            arg: *mut c_void,
        );
    }

    unsafe extern "C" fn append(text: *const c_char, arg: *mut c_void) {
        // SAFETY: mimalloc passes a NUL-terminated message and the `String` given below.
        unsafe { (*(arg as *mut String)).push_str(&CStr::from_ptr(text).to_string_lossy()) };
    }

    #[test]
    fn the_option_set_is_the_one_named() {
        // Two values, neither mimalloc's default (1000), whatever the environment set.
        for delay in [7, 0] {
            super::set_purge_delay(delay);
            let mut printed = String::new();
            // SAFETY: `append` writes only to `printed`, which outlives the call.
            unsafe { mi_options_print_out(Some(append), &mut printed as *mut String as *mut c_void) };
            let wanted = format!("option 'purge_delay': {delay}");
            assert!(printed.lines().any(|line| line.trim() == wanted), "no {wanted:?} in {printed}");
        }
    }
}
