//! The book (`docs/`) builds, and what it renders holds: mdBook (the version `tests/install-mdbook.sh` pins
//! and caches) builds it into `docs/book/` with no warning; every link and image of every rendered page
//! resolves — a page of the book and the anchor it names, or a file of the repository (a checkout reads the
//! book from `docs/book/`, three levels below the root, as the sources are); every page loads in a real
//! headless Chromium with no console message (an unknown code-block language is one); and the first page and
//! the backtest page have their headings there, and the backtest report's charts in the screenshot. Without mdBook or Chromium the tests are skipped, except under
//! `CI=true`, where they fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use trainwarden_testkit::ci;

mod browser;
use browser::{chromium, headless, png_rgb};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The mdBook binary `tests/install-mdbook.sh` installs (its cache path, from the version the script pins),
/// or `TRAINWARDEN_MDBOOK`.
fn mdbook() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TRAINWARDEN_MDBOOK") {
        return Some(PathBuf::from(path));
    }
    let script = std::fs::read_to_string(repo().join("tests/install-mdbook.sh")).unwrap();
    let version = script.lines().find_map(|l| l.strip_prefix("version=")).expect("the script pins a version");
    let cache = std::env::var_os("TRAINWARDEN_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/trainwarden")))?;
    let bin = cache.join(format!("mdbook-{version}/bin/mdbook"));
    bin.is_file().then_some(bin)
}

/// The book built once for every test of this binary: `docs/book/`, or why not (`Err`: skip).
fn built() -> Result<&'static Path, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let Some(mdbook) = mdbook() else {
                let why =
                    "mdBook is not installed (tests/install-mdbook.sh installs it; the test command runs it)";
                assert!(!ci(), "{why}; CI=true, so this fails");
                return Err(why.to_string());
            };
            let out = Command::new(&mdbook)
                .args(["build", "docs"])
                .current_dir(repo())
                .output()
                .expect("mdbook runs");
            let log = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "mdbook build docs failed:\n{log}");
            let warnings: Vec<&str> =
                log.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
            assert!(warnings.is_empty(), "mdbook build docs warned:\n{}", warnings.join("\n"));
            Ok(repo().join("docs/book"))
        })
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(Clone::clone)
}

macro_rules! book_or_skip {
    () => {
        match built() {
            Ok(book) => book,
            Err(why) => {
                eprintln!("SKIPPED: {why}");
                return;
            }
        }
    };
}

/// The values of `attr="…"` in an HTML page.
fn attributes<'a>(html: &'a str, attr: &str) -> Vec<&'a str> {
    let needle = format!(" {attr}=\"");
    html.match_indices(&needle)
        .filter_map(|(at, _)| {
            let rest = &html[at + needle.len()..];
            rest.find('"').map(|end| &rest[..end])
        })
        .collect()
}

/// `&amp;` and the percent-escapes of a URL's path, as the file system names it.
fn unescape(url: &str) -> String {
    let url = url.replace("&amp;", "&");
    let bytes = url.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = url.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// `base/relative` with `.` and `..` resolved, without touching the file system.
fn resolve(base: &Path, relative: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for part in base.join(relative).components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Every page mdBook rendered from a chapter (not its print, table-of-contents and 404 pages, which repeat
/// the chapters' links rewritten), by path.
fn pages(book: &Path) -> BTreeMap<PathBuf, String> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![book.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !["css", "fonts", "FontAwesome"].contains(&name.as_str()) {
                    dirs.push(path);
                }
            } else if name.ends_with(".html")
                && !["print.html", "toc.html", "404.html"].contains(&name.as_str())
            {
                found.insert(path.clone(), std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    found
}

#[test]
fn every_link_of_the_rendered_book_resolves() {
    let book = book_or_skip!();
    let root = repo();
    let pages = pages(book);
    let summary = std::fs::read_to_string(root.join("docs/src/SUMMARY.md")).unwrap();
    let chapters =
        summary.lines().filter(|l| l.trim_start().starts_with("- [") || l.starts_with('[')).count();
    assert!(pages.len() >= chapters, "a page per chapter: {} pages, {chapters} chapters", pages.len());
    let ids: BTreeMap<&Path, BTreeSet<&str>> =
        pages.iter().map(|(p, html)| (p.as_path(), attributes(html, "id").into_iter().collect())).collect();
    let mut broken = Vec::new();
    let mut checked = 0;
    for (page, html) in &pages {
        let shown = page.strip_prefix(book).unwrap().display().to_string();
        let mut targets = attributes(html, "href");
        targets.extend(attributes(html, "src"));
        for target in targets {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
            {
                broken.push(format!("{shown}: {target}: the book links nothing outside the repository"));
                continue;
            }
            if target.starts_with("javascript:") || target.starts_with("data:") {
                continue;
            }
            checked += 1;
            let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
            let path = path.split('?').next().unwrap();
            let file =
                if path.is_empty() { page.clone() } else { resolve(page.parent().unwrap(), &unescape(path)) };
            if !file.starts_with(&root) {
                broken.push(format!("{shown}: {target}: outside the repository"));
                continue;
            }
            if !file.exists() {
                broken.push(format!(
                    "{shown}: {target}: no such file ({})",
                    file.strip_prefix(&root).unwrap().display()
                ));
                continue;
            }
            if !fragment.is_empty() {
                let fragment = unescape(fragment);
                match ids.get(file.as_path()) {
                    Some(ids) if ids.contains(fragment.as_str()) => {}
                    Some(_) => broken.push(format!("{shown}: {target}: no anchor #{fragment} there")),
                    // A fragment into a repository file (a line of source) is not the book's to check.
                    None => {}
                }
            }
        }
    }
    assert!(checked > 500, "links were found: {checked}");
    assert!(broken.is_empty(), "{} broken links in the rendered book:\n{}", broken.len(), broken.join("\n"));
}

/// Chromium's console lines (errors and uncaught exceptions included: it logs every console message) when
/// it loads `page`, and the DOM the page's scripts leave.
fn render(browser: &Path, page: &Path, scratch: &Path) -> String {
    let url = format!("file://{}", page.display());
    let out = headless(browser, &["--dump-dom", &url], &scratch.join("profile-dom"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let log = String::from_utf8_lossy(&out.stderr);
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "{}: console messages: {console:#?}", page.display());
    String::from_utf8(out.stdout).unwrap()
}

fn screenshot(browser: &Path, page: &Path, scratch: &Path, height: u32) -> Vec<[u8; 3]> {
    let shot = scratch.join(format!("{}.png", page.file_stem().unwrap().to_string_lossy()));
    let window = format!("--window-size=1280,{height}");
    let target = format!("--screenshot={}", shot.display());
    let url = format!("file://{}", page.display());
    let out = headless(browser, &[&window, &target, &url], &scratch.join("profile-shot"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (width, h, pixels) = png_rgb(&std::fs::read(&shot).unwrap());
    assert_eq!((width, h), (1280, height as usize));
    pixels
}

fn near(rgb: [u8; 3], (r, g, b): (u8, u8, u8)) -> bool {
    rgb[0].abs_diff(r) < 24 && rgb[1].abs_diff(g) < 24 && rgb[2].abs_diff(b) < 24
}

#[test]
fn the_first_page_and_the_backtest_page_render_in_chromium() {
    let book = book_or_skip!();
    let Some(browser) = chromium() else {
        assert!(
            !ci(),
            "chromium is not installed (tests/install-prereqs.sh installs it; CI=true, so this fails)"
        );
        eprintln!("SKIPPED: chromium is not installed (tests/install-prereqs.sh installs it)");
        return;
    };
    let scratch = std::env::temp_dir().join(format!("trainwarden-book-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();

    // The first page: its headings, and a sidebar that lists every chapter (book.js fills it in).
    let index = book.join("index.html");
    let dom = render(&browser, &index, &scratch);
    for heading in
        [r#"<h1 id="trainwarden">"#, r#"<h2 id="the-friday-story">"#, r#"<h2 id="where-to-start">"#]
    {
        assert!(dom.contains(heading), "the first page lacks {heading}");
    }
    let summary = std::fs::read_to_string(repo().join("docs/src/SUMMARY.md")).unwrap();
    for chapter in
        summary.lines().filter_map(|l| l.trim().strip_prefix("- [")).map(|l| l.split(']').next().unwrap())
    {
        // `<a href="…"><strong aria-hidden="true">1.</strong> Replay the Friday story</a>`
        assert!(
            dom.contains(&format!("</strong> {chapter}</a>")),
            "the sidebar lacks the chapter {chapter:?}"
        );
    }
    let pixels = screenshot(&browser, &index, &scratch, 1000);
    let ink = pixels.iter().filter(|p| p.iter().all(|c| *c < 96)).count();
    assert!(ink > 5_000, "the first page's text is drawn: {ink} dark pixels");

    // The backtest page: its sections, and the report's picture drawn with its charts (the stop markers'
    // red, which nothing else in the book uses). The report itself is rendered by tests/backtest.rs.
    let page = book.join("ml-engineers/backtest.html");
    let dom = render(&browser, &page, &scratch);
    assert!(
        dom.contains(r#"<h1 id="backtest-choose-a-policy-on-your-own-history">"#),
        "the backtest page's title"
    );
    assert!(dom.contains("backtest-plateau.png"), "the backtest page shows the report");
    let pixels = screenshot(&browser, &page, &scratch, 9_000);
    let stop = pixels.iter().filter(|p| near(**p, (0xd6, 0x27, 0x28))).count();
    // The picture is scaled to the page's width, its stop markers with it (about 50 pixels of that red).
    assert!(stop > 30, "the report's charts are drawn on the backtest page: {stop} stop-red pixels");
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Every chapter loads without a console message: a script error, a missing asset, or highlight.js meeting a
/// code-block language it does not know.
#[test]
fn every_page_loads_in_chromium_without_a_console_message() {
    let book = book_or_skip!();
    let Some(browser) = chromium() else {
        assert!(
            !ci(),
            "chromium is not installed (tests/install-prereqs.sh installs it; CI=true, so this fails)"
        );
        eprintln!("SKIPPED: chromium is not installed (tests/install-prereqs.sh installs it)");
        return;
    };
    let scratch = std::env::temp_dir().join(format!("trainwarden-book-pages-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let pages = pages(book);
    for page in pages.keys() {
        let dom = render(&browser, page, &scratch);
        assert!(dom.contains("<h1"), "{} has no title", page.display());
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
