//! The training command: started in a process group of its own, so a stop reaches everything it started
//! (data-loader workers, `torchrun` ranks), the way a pod's termination does; stdin, stdout and stderr are
//! inherited untouched.
//!
//! The command dies with its supervisor, even one killed with SIGKILL (which no handler sees): on Linux it
//! is started with a parent-death signal (`PR_SET_PDEATHSIG`, SIGKILL) from a thread that lives as long as
//! the [`Supervised`] handle. That covers the command's own process only; a watchdog (`Guard`) kills the
//! rest of its process group. See [`Supervised::spawn`].

use std::ffi::OsString;
use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// A started command.
pub struct Supervised {
    child: tokio::process::Child,
    /// The process group id (the child's pid, as it leads its own group).
    group: Pid,
    /// Kills the whole group if trainwarden dies while the command runs (`None`: it could not be started).
    guard: Option<Guard>,
    /// Keeps the thread that forked the command alive (see [`Supervised::spawn`]); dropped last.
    _keep: std::sync::mpsc::Sender<()>,
}

/// Why a command could not be started, with the exit code a shell would use.
#[derive(Debug)]
pub struct SpawnError {
    /// What went wrong, for the user (e.g. `cannot run train.py: No such file or directory`).
    pub message: String,
    /// 127: not found; 126: found but not executable.
    pub exit_code: u8,
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this status code.
    Code(i32),
    /// It was killed by this signal number.
    Signal(i32),
}

impl Exit {
    fn from_status(status: ExitStatus) -> Exit {
        match (status.code(), status.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(s)) => Exit::Signal(s),
            // Neither is impossible on Unix for a reaped child; report it as a failure.
            (None, None) => Exit::Code(1),
        }
    }

    /// The shell's convention: the code, or 128 + the signal number.
    pub fn shell_code(self) -> u8 {
        match self {
            Exit::Code(c) => u8::try_from(c).unwrap_or(1),
            Exit::Signal(s) => u8::try_from(128 + s).unwrap_or(255),
        }
    }

    /// Whether it exited with code 0.
    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit status {c}"),
            Exit::Signal(s) => match Signal::try_from(*s) {
                Ok(sig) => write!(f, "killed by {}", sig.as_str()),
                Err(_) => write!(f, "killed by signal {s}"),
            },
        }
    }
}

impl Supervised {
    /// Starts `command` (program and arguments) with `env` added to trainwarden's own environment. Must be
    /// called within a Tokio runtime.
    ///
    /// On Linux the command gets SIGKILL when trainwarden dies (`PR_SET_PDEATHSIG`). SIGKILL rather than
    /// SIGTERM: with the supervisor gone nobody enforces the grace period, so a command that traps SIGTERM
    /// (to checkpoint, or because it hangs) would keep its GPUs forever — the orphan this is meant to prevent;
    /// a checkpoint on SIGTERM is what a policy's suspend or a Ctrl-C of trainwarden gives. That signal
    /// goes to the command's process only; what it started (the Python under `sh -c`, `torchrun`'s ranks,
    /// data-loader workers) is reached by a watchdog (`Guard`) instead, which kills the whole process group.
    pub fn spawn(command: &[OsString], env: &[(String, OsString)]) -> Result<Supervised, SpawnError> {
        let fail = |message: String| SpawnError { message, exit_code: 1 };
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| fail(format!("starting the command outside a Tokio runtime: {e}")))?;
        let (command, env) = (command.to_vec(), env.to_vec());
        let (started_tx, started) = std::sync::mpsc::channel();
        let (keep, kept) = std::sync::mpsc::channel::<()>();
        // The parent-death signal fires when the *thread* that forked the child ends, not the process. The
        // caller's thread may end while the watch goes on (a plain thread, a blocking-pool thread after 10 s
        // idle; which runtime thread polls a task is not fixed), which would kill the command early. So the
        // command is forked from a thread of its own that waits, doing nothing, until the `Supervised`
        // handle (holding `keep`) is dropped: at the end of the watch, or when trainwarden dies.
        std::thread::Builder::new()
            .name("trainwarden-command".into())
            .spawn(move || {
                let _runtime = runtime.enter();
                let _ = started_tx.send(spawn_here(&command, &env));
                let _ = kept.recv();
            })
            .map_err(|e| fail(format!("starting the supervisor thread: {e}")))?;
        let (child, group) = started.recv().map_err(|e| fail(format!("starting the command: {e}")))??;
        let guard = Guard::start(group)
            .map_err(|e| tracing::warn!("the command's processes may outlive a killed trainwarden: {e}"))
            .ok();
        Ok(Supervised { child, group, guard, _keep: keep })
    }

    /// The command's process group, for signalling while [`Supervised::wait`] is pending.
    pub fn group(&self) -> ProcessGroup {
        ProcessGroup(self.group)
    }

    /// Waits for the command (the group leader) to exit.
    pub async fn wait(&mut self) -> Result<Exit, String> {
        let status = self.child.wait().await;
        if status.is_ok()
            && let Some(guard) = &mut self.guard
        {
            // Reaped: from now on its process group id may name another group once this one is empty.
            guard.disarm();
        }
        status.map(Exit::from_status).map_err(|e| format!("waiting for the command: {e}"))
    }
}

/// A watchdog for the command's process group, for what the parent-death signal does not reach (the
/// command's own children, e.g. the Python under `sh -c`, `torchrun`'s ranks): a `sh` in a process group of
/// its own (so Ctrl-C at the terminal does not reach it) that blocks reading a pipe only trainwarden can
/// write to. When trainwarden dies, however it dies, the kernel closes the pipe; `read` sees the end of it
/// and the watchdog sends SIGKILL to the command's group. After the command has exited (and been reaped)
/// it is disarmed with `done`, so it never signals a group id that may have been reused; what the command
/// leaves behind after its own end is therefore not covered.
struct Guard {
    disarm: Option<std::io::PipeWriter>,
    /// Reaped by Tokio in the background once dropped.
    _watchdog: tokio::process::Child,
}

impl Guard {
    const SCRIPT: &str = r#"read -r word; [ "$word" = done ] || kill -s KILL -- "-$1""#;

    fn start(group: Pid) -> Result<Guard, String> {
        // Both ends close on exec: the command (already started) and the watchdog's own exec keep no writer.
        let (reader, writer) = std::io::pipe().map_err(|e| format!("creating a pipe: {e}"))?;
        let watchdog = tokio::process::Command::new("/bin/sh")
            .args(["-c", Guard::SCRIPT, "trainwarden-guard"])
            .arg(group.as_raw().to_string())
            .stdin(reader)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("starting /bin/sh: {e}"))?;
        Ok(Guard { disarm: Some(writer), _watchdog: watchdog })
    }

    fn disarm(&mut self) {
        if let Some(mut writer) = self.disarm.take() {
            // A watchdog that is gone already (EPIPE) has nothing left to do either.
            let _ = std::io::Write::write_all(&mut writer, b"done\n");
        }
    }
}

/// Forks and execs the command from the calling thread (which must outlive it, see [`Supervised::spawn`]).
fn spawn_here(
    command: &[OsString],
    env: &[(String, OsString)],
) -> Result<(tokio::process::Child, Pid), SpawnError> {
    let Some((program, args)) = command.split_first() else {
        return Err(SpawnError { message: "no command given".into(), exit_code: 2 });
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).envs(env.iter().map(|(k, v)| (k, v))).process_group(0).kill_on_drop(true);
    #[cfg(target_os = "linux")]
    die_with_parent(&mut cmd);
    let child = cmd.spawn().map_err(|e| SpawnError {
        message: format!("cannot run {}: {e}", program.to_string_lossy()),
        exit_code: if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 },
    })?;
    let pid = child.id().ok_or_else(|| SpawnError {
        message: format!("{} exited before it could be supervised", program.to_string_lossy()),
        exit_code: 1,
    })?;
    let group = Pid::from_raw(
        i32::try_from(pid)
            .map_err(|_| SpawnError { message: format!("process id {pid} out of range"), exit_code: 1 })?,
    );
    Ok((child, group))
}

/// SIGKILL to the child when the forking thread ends (see [`Supervised::spawn`]).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut tokio::process::Command) {
    let parent = nix::unistd::getpid();
    let hook = move || {
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
        // trainwarden may have died between the fork and the prctl, which then arms nothing: the child has
        // been re-parented already. It must not run on orphaned.
        // An error makes the child exit before exec.
        if nix::unistd::getppid() != parent {
            return Err(nix::errno::Errno::ESRCH.into());
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec, where only async-signal-safe calls are allowed:
    // prctl(2) and getppid(2) are plain system calls (nix's wrappers neither allocate nor lock), and an error
    // is an `io::Error` made from an errno, which does not allocate either.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// A handle on the command's process group.
#[derive(Clone, Copy, Debug)]
pub struct ProcessGroup(Pid);

impl ProcessGroup {
    /// The process group id (the command's pid).
    pub fn id(self) -> i32 {
        self.0.as_raw()
    }

    /// Sends `signal` to the whole group. A group that is already gone is not an error.
    pub fn signal(self, signal: Signal) -> Result<(), String> {
        match killpg(self.0, signal) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
            Err(e) => Err(format!("sending {} to process group {}: {e}", signal.as_str(), self.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// PR_SET_PDEATHSIG fires when the thread that forked the child ends: the command must not die with
    /// the (short-lived) thread that asked for it, only with the process.
    #[tokio::test]
    async fn the_command_outlives_the_thread_that_started_it() {
        let runtime = tokio::runtime::Handle::current();
        let command: Vec<OsString> = ["sleep", "30"].iter().map(OsString::from).collect();
        let mut child = std::thread::spawn(move || {
            let _runtime = runtime.enter();
            Supervised::spawn(&command, &[])
        })
        .join()
        .unwrap()
        .unwrap();
        // That thread has ended; the command is still running.
        let early = tokio::time::timeout(Duration::from_millis(500), child.wait()).await;
        assert!(early.is_err(), "the command ended with the thread that started it: {early:?}");
        child.group().signal(Signal::SIGKILL).unwrap();
        assert_eq!(child.wait().await, Ok(Exit::Signal(9)));
    }
}
