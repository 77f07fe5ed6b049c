//! host/link/ordered-link, the `cc -wrapper` the release link of wasmcni
//! runs through (host/build.rs): it hands the linker the hot-symbol list
//! with each name the objects do not define replaced by the names they do
//! define that differ from it only in ThinLTO's `.llvm.N` suffix, and
//! otherwise runs the linker's command line as it is.

use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("link/ordered-link")
}

/// An object defining `keep`, `foo.llvm.9`, `bar`, `dup.llvm.1` and
/// `dup.llvm.2` (asm labels give C functions ThinLTO's names).
fn object(dir: &Path) -> PathBuf {
    let src = dir.join("t.c");
    std::fs::write(
        &src,
        r#"int keep(void) { return 0; }
int f(void) __asm__("foo.llvm.9"); int f(void) { return 1; }
int bar(void) { return 2; }
int d1(void) __asm__("dup.llvm.1"); int d1(void) { return 3; }
int d2(void) __asm__("dup.llvm.2"); int d2(void) { return 4; }
"#,
    )
    .unwrap();
    let obj = dir.join("t.o");
    let st = Command::new("cc")
        .arg("-c")
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .status()
        .expect("cc (the linker driver every Rust build needs)");
    assert!(st.success(), "cc -c t.c");
    obj
}

/// Runs the script with a stand-in "linker" that prints each argument,
/// then the contents of the ordering file it was given, and exits 3.
fn run(args: &[&std::ffi::OsStr]) -> (i32, String) {
    let out = Command::new("sh")
        .arg(script())
        .args([
            "sh",
            "-c",
            r#"for a; do echo "arg $a"; case $a in --symbol-ordering-file=*) cat "${a#*=}";; esac; done; exit 3"#,
            "linker",
        ])
        .args(args)
        .output()
        .expect("sh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[test]
fn the_list_names_this_builds_renamed_functions_and_the_linker_runs_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let obj = object(dir.path());
    let list = dir.path().join("hot.txt");
    std::fs::write(
        &list,
        "keep\nfoo.llvm.123\nbar.llvm.5\ndup.llvm.7\ngone.llvm.3\nkeep\n",
    )
    .unwrap();
    let order = format!("--symbol-ordering-file={}", list.display());
    let (code, out) = run(&[obj.as_os_str(), "-o".as_ref(), order.as_ref()]);
    assert_eq!(code, 3, "the linker's exit status: {out}");
    let lines: Vec<&str> = out.lines().collect();
    // The arguments in order, only the list's path replaced.
    assert_eq!(lines[0], format!("arg {}", obj.display()));
    assert_eq!(lines[1], "arg -o");
    let given = lines[2]
        .strip_prefix("arg --symbol-ordering-file=")
        .expect("the ordering file argument");
    assert_ne!(Path::new(given), list, "the list was not rewritten: {out}");
    assert_eq!(
        lines[3..],
        [
            "keep",
            "foo.llvm.9",
            "bar",
            "dup.llvm.1",
            "dup.llvm.2",
            "gone.llvm.3"
        ],
        "{out}"
    );
    assert!(
        !Path::new(given).exists(),
        "the rewritten list is left behind"
    );
}

#[test]
fn without_a_list_the_command_runs_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let obj = object(dir.path());
    let (code, out) = run(&[obj.as_os_str(), "-o".as_ref(), "x".as_ref()]);
    assert_eq!(code, 3);
    assert_eq!(
        out,
        format!("arg {}\narg -o\narg x\n", obj.display()),
        "{out}"
    );
}
