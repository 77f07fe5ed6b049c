//! `wasmcni new NAME`: a new plugin crate from the template in
//! `templates/plugin/` (embedded in the binary).
//!
//! The crate is what a plugin author starts from: a `Cargo.toml` that
//! depends on guest-sdk (the crate crates.io has as `wasmcni-guest-sdk`,
//! by version; or by path, or by git) and is a workspace of its own,
//! `.cargo/config.toml` that makes `wasm32-wasip2` the build target,
//! `src/main.rs` (a chained plugin whose `main` is one call, with native
//! unit tests of its config parsing), a starter policy entry
//! (`policy.json`), a network to try it in (`net.conflist`: bridge +
//! host-local, then the plugin), a README with the commands, and a
//! `.gitignore`.
//!
//! guest-sdk is `--sdk-git URL [--sdk-rev COMMIT]` (a git dependency on
//! wasmcni's repository), else the directory `--sdk PATH` (a checkout's
//! `guest-sdk/`), else the published crate at the version this wasmcni was
//! built with ([`SDK_VERSION`]): `guest-sdk = { package =
//! "wasmcni-guest-sdk", version = "0.1.0" }`. In each the dependency key is
//! `guest-sdk`, so the plugin's code says `use guest_sdk::...`.

use std::io::Write;
use std::path::{Path, PathBuf};

/// One file of the template: its path in the new crate and its text, in
/// which `{{name}}` stands for the plugin name and `{{sdk}}` for the
/// guest-sdk dependency (a TOML inline table).
const TEMPLATE: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        include_str!("../../../templates/plugin/Cargo.toml.in"),
    ),
    (
        ".cargo/config.toml",
        include_str!("../../../templates/plugin/.cargo/config.toml.in"),
    ),
    (
        "src/main.rs",
        include_str!("../../../templates/plugin/src/main.rs.in"),
    ),
    (
        "policy.json",
        include_str!("../../../templates/plugin/policy.json.in"),
    ),
    (
        "net.conflist",
        include_str!("../../../templates/plugin/net.conflist.in"),
    ),
    (
        "README.md",
        include_str!("../../../templates/plugin/README.md.in"),
    ),
    (
        ".gitignore",
        include_str!("../../../templates/plugin/gitignore.in"),
    ),
];

/// Names Cargo refuses for a package, or that would shadow a crate every
/// build links (`cargo new` refuses them too), and wasmcni's own name.
const RESERVED: &[&str] = &[
    "alloc",
    "core",
    "proc-macro",
    "proc_macro",
    "std",
    "test",
    "wasmcni",
];

/// Rust keywords, which Cargo refuses as package names.
const KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
    "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl",
    "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref",
    "return", "self", "static", "struct", "super", "trait", "true", "try", "type", "typeof",
    "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// Why a plugin crate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The name cannot be a plugin's or a Cargo package's.
    #[error("invalid plugin name {name:?}: {why}")]
    InvalidName {
        /// The name given.
        name: String,
        /// Which rule it breaks.
        why: String,
    },
    /// The target directory exists and has files in it.
    #[error("{}: exists and is not empty; choose another --dir", .0.display())]
    NotEmpty(PathBuf),
    /// guest-sdk was not found.
    #[error("{0}")]
    NoSdk(String),
    /// A file could not be written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// guest-sdk's package name: the name crates.io has it under (a plugin's
/// Cargo.toml renames it `guest-sdk`).
pub const SDK_PACKAGE: &str = "wasmcni-guest-sdk";

/// The guest-sdk version this wasmcni was built with: guest-sdk and
/// wasmcni-tools both take the workspace's version (a test checks it
/// against Cargo.lock), so a crate `new` makes asks for the SDK whose WIT
/// this host speaks, or a later compatible one.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where a new crate gets guest-sdk from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sdk {
    /// The published crate (crates.io), by version requirement.
    Version(String),
    /// The guest-sdk/ directory of a wasmcni checkout.
    Path(PathBuf),
    /// wasmcni's repository, by git (cargo fetches it: what a plugin
    /// repository's CI needs), at a commit, else its default branch.
    Git {
        /// The repository's URL.
        url: String,
        /// The commit (or tag) to pin.
        rev: Option<String>,
    },
}

impl Sdk {
    /// The dependency, as the TOML inline table of `guest-sdk = ...`.
    pub fn dependency(&self) -> String {
        let source = match self {
            Sdk::Version(v) => format!("version = {}", toml_string(v)),
            Sdk::Path(p) => format!("path = {}", toml_string(&p.to_string_lossy())),
            Sdk::Git { url, rev: None } => format!("git = {}", toml_string(url)),
            Sdk::Git { url, rev: Some(r) } => {
                format!("git = {}, rev = {}", toml_string(url), toml_string(r))
            }
        };
        format!("{{ package = {}, {source} }}", toml_string(SDK_PACKAGE))
    }
}

impl std::fmt::Display for Sdk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sdk::Version(v) => write!(f, "{SDK_PACKAGE} {v} from crates.io"),
            Sdk::Path(p) => write!(f, "{}", p.display()),
            Sdk::Git { url, rev: None } => write!(f, "git {url}, its default branch (unpinned)"),
            Sdk::Git { url, rev: Some(r) } => write!(f, "git {url} at {r}"),
        }
    }
}

/// What `new` made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scaffold {
    /// The crate's directory.
    pub dir: PathBuf,
    /// The guest-sdk its `Cargo.toml` depends on.
    pub sdk: Sdk,
    /// The files written, relative to `dir`.
    pub files: Vec<&'static str>,
}

/// Checks that `name` can be both a plugin name
/// ([`valid_name`](wasmcni_runtime::plugins::valid_name), the name runtimes call it
/// by) and a Cargo package name (whose binary is `NAME.wasm`), and is not
/// a standard plugin's.
pub fn check_name(name: &str) -> Result<(), ScaffoldError> {
    let bad = |why: &str| {
        Err(ScaffoldError::InvalidName {
            name: name.to_owned(),
            why: why.to_owned(),
        })
    };
    if !wasmcni_runtime::plugins::valid_name(name) {
        return bad("a plugin name is 1 to 64 of [A-Za-z0-9_.-], not starting with `.`");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return bad("a Cargo package name has only [A-Za-z0-9_-] (no `.`)");
    }
    if !name.as_bytes()[0].is_ascii_alphabetic() {
        return bad("it must start with a letter");
    }
    if RESERVED.contains(&name) || KEYWORDS.contains(&name) {
        return bad("Cargo or wasmcni reserves it");
    }
    if wasmcni_runtime::plugins::taken(name) {
        return bad("a standard plugin or component has it");
    }
    Ok(())
}

/// The guest-sdk of the checkout this binary was built from, if it is
/// still there.
pub fn checkout_sdk() -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../guest-sdk")
        .canonicalize()
        .ok()?;
    is_sdk(&d).then_some(d)
}

/// Whether `dir` holds the guest-sdk crate.
fn is_sdk(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| {
        t.lines()
            .any(|l| l.trim() == format!("name = {}", toml_string(SDK_PACKAGE)))
    })
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The text of each template file for plugin `name` and guest-sdk `sdk`.
pub fn render(name: &str, sdk: &Sdk) -> Vec<(&'static str, String)> {
    let sdk = sdk.dependency();
    TEMPLATE
        .iter()
        .map(|(path, text)| {
            (
                *path,
                text.replace("{{name}}", name).replace("{{sdk}}", &sdk),
            )
        })
        .collect()
}

/// Makes plugin crate `name` in `dir` (default `./NAME`), depending on
/// `git` (wasmcni's repository, and a commit) if given, else the guest-sdk
/// at `sdk`, else the published guest-sdk, version [`SDK_VERSION`].
/// Refuses an invalid name, a directory that exists and is not empty, and
/// writes no file over another (each is created exclusively).
pub fn new(
    name: &str,
    dir: Option<&Path>,
    sdk: Option<&Path>,
    git: Option<(&str, Option<&str>)>,
) -> Result<Scaffold, ScaffoldError> {
    check_name(name)?;
    let dir = dir.map_or_else(|| PathBuf::from(name), Path::to_owned);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ScaffoldError::Io { path, source }
    };
    let sdk = match (git, sdk) {
        (Some(_), Some(_)) => {
            return Err(ScaffoldError::NoSdk(
                "--sdk and --sdk-git both name guest-sdk; give one".into(),
            ))
        }
        (Some((url, rev)), None) => {
            if url.is_empty() || rev.is_some_and(str::is_empty) {
                return Err(ScaffoldError::NoSdk(
                    "--sdk-git and --sdk-rev must not be empty".into(),
                ));
            }
            Sdk::Git {
                url: url.to_owned(),
                rev: rev.map(str::to_owned),
            }
        }
        (None, Some(sdk)) => {
            let p = path_sdk(sdk)?;
            Sdk::Path(std::fs::canonicalize(&p).map_err(io(&p))?)
        }
        (None, None) => Sdk::Version(SDK_VERSION.to_owned()),
    };
    match std::fs::read_dir(&dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(ScaffoldError::NotEmpty(dir));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&dir)(e)),
    }
    let mut files = Vec::new();
    for (path, text) in render(name, &sdk) {
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(io(&file))?;
        files.push(path);
    }
    Ok(Scaffold { dir, sdk, files })
}

/// The guest-sdk directory `sdk`, checked.
fn path_sdk(sdk: &Path) -> Result<PathBuf, ScaffoldError> {
    if is_sdk(sdk) {
        return Ok(sdk.to_owned());
    }
    Err(ScaffoldError::NoSdk(format!(
        "--sdk {}: no guest-sdk crate there (its Cargo.toml must say name = \"{SDK_PACKAGE}\"); \
         give the guest-sdk/ directory of a wasmcni checkout, --sdk-git URL (wasmcni's \
         repository), or neither (the published {SDK_PACKAGE} {SDK_VERSION})",
        sdk.display()
    )))
}

/// The `cargo --config` argument that builds a crate depending on the
/// published guest-sdk against the one at `dir` instead (a checkout's
/// guest-sdk/, whose own dependencies it finds by path): what an author
/// uses before that version is on crates.io.
pub fn patch_arg(dir: &Path) -> String {
    format!(
        "patch.crates-io.{SDK_PACKAGE}.path={}",
        toml_string(&dir.to_string_lossy())
    )
}

/// `wasmcni new`: makes the crate and prints what to do next.
pub fn run(
    name: &str,
    dir: Option<&Path>,
    sdk: Option<&Path>,
    git: Option<(&str, Option<&str>)>,
) -> anyhow::Result<()> {
    let s = new(name, dir, sdk, git)?;
    println!(
        "created plugin crate {name} in {} (guest-sdk: {})",
        s.dir.display(),
        s.sdk
    );
    for f in &s.files {
        println!("  {f}");
    }
    println!(
        "next:\n  cd {dir}\n  cargo test --target host-tuple   # unit tests, natively\n  \
         cargo build --release            # target/wasm32-wasip2/release/{name}.wasm\n  \
         sudo wasmcni try target/wasm32-wasip2/release/{name}.wasm --config net.conflist\n  \
         # (a throwaway sandbox: bridge + host-local run first, as in net.conflist)",
        dir = s.dir.display()
    );
    match &s.sdk {
        Sdk::Version(v) => println!(
            "guest-sdk is {SDK_PACKAGE} {v} from crates.io; until that version is published \
             there, build against a wasmcni checkout's guest-sdk/ instead:\n  cargo build \
             --release --config '{}'\n(or make the crate with --sdk DIR)",
            patch_arg(&checkout_sdk().unwrap_or_else(|| PathBuf::from("<checkout>/guest-sdk")))
        ),
        Sdk::Path(_) => println!(
            "guest-sdk is a path on this machine: a repository of its own depends on the \
             published crate, `guest-sdk = {}` in Cargo.toml (what `wasmcni new` writes \
             without --sdk), or by git (`wasmcni new --sdk-git URL --sdk-rev COMMIT`)",
            Sdk::Version(SDK_VERSION.to_owned()).dependency()
        ),
        Sdk::Git { rev: None, .. } => println!(
            "guest-sdk follows the repository's default branch: pin it with --sdk-rev COMMIT \
             (rev = \"...\" in Cargo.toml); Cargo.lock pins it meanwhile"
        ),
        Sdk::Git { .. } => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sdk() -> PathBuf {
        checkout_sdk().expect("tests run in the checkout, which has guest-sdk/")
    }

    #[test]
    fn names_must_suit_both_cni_and_cargo() {
        for good in ["mtu-setter", "my_plugin2", "X"] {
            check_name(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for (bad, why) in [
            ("", "plugin name"),
            ("../evil", "plugin name"),
            (".hidden", "plugin name"),
            ("a/b", "plugin name"),
            (&"a".repeat(65), "plugin name"),
            ("my.plugin", "no `.`"),
            ("2fast", "start with a letter"),
            ("-x", "start with a letter"),
            ("test", "reserves"),
            ("fn", "reserves"),
            ("wasmcni", "reserves"),
            ("bridge", "standard plugin"),
        ] {
            let e = check_name(bad).expect_err(bad).to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_template_is_rendered_whole() {
        let files = render(
            "my-plugin",
            &Sdk::Path(PathBuf::from("/opt/wasm \"cni\"/guest-sdk")),
        );
        let paths: Vec<&str> = files.iter().map(|(p, _)| *p).collect();
        assert_eq!(
            paths,
            [
                "Cargo.toml",
                ".cargo/config.toml",
                "src/main.rs",
                "policy.json",
                "net.conflist",
                "README.md",
                ".gitignore"
            ]
        );
        for (path, text) in &files {
            for token in ["{{name}}", "{{sdk}}"] {
                assert!(!text.contains(token), "{path}: {token} is left");
            }
        }
        let cargo = &files[0].1;
        assert!(cargo.contains(r#"name = "my-plugin""#), "{cargo}");
        assert!(
            cargo.contains(
                r#"guest-sdk = { package = "wasmcni-guest-sdk", path = "/opt/wasm \"cni\"/guest-sdk" }"#
            ),
            "{cargo}"
        );
        assert!(files[1].1.contains(r#"target = "wasm32-wasip2""#));
        let main = &files[2].1;
        assert!(main.contains("skel::run(Main,"), "main is one call");
        assert!(main.contains("#[cfg(test)]"), "it has tests");
        // The starter entry is a valid policy that names the plugin and
        // grants it only the container namespace.
        let policy =
            wasmcni_runtime::policy::Policy::parse(&files[3].1, "policy.json").expect("policy");
        assert_eq!(policy.names(), ["my-plugin"]);
        let entry = policy.entry("my-plugin");
        assert!(entry.container.read && entry.container.modify);
        assert!(entry.host.is_none() && entry.delegates.is_empty());
        assert!(entry.ipam_roots.is_empty() && entry.container.create.is_empty());
        // The network to try it in names it last, after bridge.
        let net: serde_json::Value = serde_json::from_str(&files[4].1).expect("net.conflist");
        assert_eq!(net["plugins"][0]["type"], "bridge");
        assert_eq!(net["plugins"][1]["type"], "my-plugin");
        // By git: the URL and the commit, as TOML strings.
        let git = render(
            "my-plugin",
            &Sdk::Git {
                url: "https://example.org/wasmcni.git".into(),
                rev: Some("0123abc".into()),
            },
        );
        assert!(
            git[0].1.contains(
                r#"guest-sdk = { package = "wasmcni-guest-sdk", git = "https://example.org/wasmcni.git", rev = "0123abc" }"#
            ),
            "{}",
            git[0].1
        );
    }

    #[test]
    fn new_writes_the_crate_and_refuses_to_overwrite() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p");
        let s = new("my-plugin", Some(&dir), Some(&sdk()), None).expect("new");
        assert_eq!(s.dir, dir);
        let Sdk::Path(sdk_path) = &s.sdk else {
            panic!("{:?}", s.sdk)
        };
        assert!(sdk_path.is_absolute());
        for f in &s.files {
            assert!(dir.join(f).is_file(), "{f}");
        }
        let cargo = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(
            cargo.contains(&toml_string(&sdk_path.to_string_lossy())),
            "{cargo}"
        );
        // Again: the directory is not empty now; nothing is touched.
        std::fs::write(dir.join("src/main.rs"), "mine").unwrap();
        let e = new("my-plugin", Some(&dir), Some(&sdk()), None).unwrap_err();
        assert!(matches!(e, ScaffoldError::NotEmpty(_)), "{e}");
        assert_eq!(
            std::fs::read_to_string(dir.join("src/main.rs")).unwrap(),
            "mine"
        );
        // An empty directory is fine.
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        new("other", Some(&empty), Some(&sdk()), None).expect("into an empty dir");
    }

    #[test]
    fn a_wrong_sdk_path_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let e = new("x1", Some(&tmp.path().join("x1")), Some(tmp.path()), None).unwrap_err();
        assert!(matches!(e, ScaffoldError::NoSdk(_)), "{e}");
        assert!(e.to_string().contains("--sdk"), "{e}");
        assert!(!tmp.path().join("x1").exists(), "nothing written");
        let e = new("x.1", None, Some(&sdk()), None).unwrap_err();
        assert!(matches!(e, ScaffoldError::InvalidName { .. }), "{e}");
        let x2 = tmp.path().join("x2");
        for (sdk, git, want) in [
            (Some(sdk()), Some(("https://x", None)), "give one"),
            (None, Some(("", None)), "must not be empty"),
            (None, Some(("https://x", Some(""))), "must not be empty"),
        ] {
            let e = new("x2", Some(&x2), sdk.as_deref(), git).unwrap_err();
            assert!(e.to_string().contains(want), "{e}");
        }
        assert!(!x2.exists(), "nothing written");
    }

    #[test]
    fn by_default_the_crate_asks_for_the_published_sdk_of_this_build() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p");
        let s = new("my-plugin", Some(&dir), None, None).expect("new");
        assert_eq!(s.sdk, Sdk::Version(SDK_VERSION.to_owned()));
        let cargo = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(
            cargo.contains(&format!(
                r#"guest-sdk = {{ package = "wasmcni-guest-sdk", version = "{SDK_VERSION}" }}"#
            )),
            "{cargo}"
        );
        // The version is guest-sdk's, which this crate's only shares by
        // taking the workspace's: the lock file says what each is.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap();
        let locked = lock
            .split("[[package]]")
            .find(|p| p.contains(&format!("\nname = {}\n", toml_string(SDK_PACKAGE))))
            .expect("guest-sdk in Cargo.lock");
        assert!(
            locked.contains(&format!("\nversion = \"{SDK_VERSION}\"\n")),
            "this build is {SDK_VERSION}, guest-sdk: {locked}"
        );
        // The checkout's guest-sdk/ is the package of that name, which the
        // patch argument names.
        assert!(is_sdk(&sdk()));
        assert_eq!(
            patch_arg(Path::new("/w/guest-sdk")),
            r#"patch.crates-io.wasmcni-guest-sdk.path="/w/guest-sdk""#
        );
    }
}
