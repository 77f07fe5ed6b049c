//! `wasmcni uninstall DIR`: removes what `wasmcni install` wrote, and puts
//! back what its `--force` replaced.
//!
//! What is install's is what install itself would replace without
//! `--force` ([`crate::install`]'s ownership rules):
//! - in the bin dir: every link `X -> wasmcni`, `wasmcni` if it carries
//!   wasmcni's marker, the artifact cache `.wasmcni-cache`;
//! - in the plugin dir, policy dir, conf dir and the policy file's
//!   directory: each file the `.wasmcni-owned` record there lists whose
//!   bytes still have the recorded sha256, and the record itself.
//!
//! A file someone changed since install wrote it is theirs: it is left
//! alone, with a warning. Each backup `--force` kept
//! (`.wasmcni-backup/NAME`) is renamed back over install's file in one
//! step; one whose name is taken by something that is not install's
//! (another installer's binary written over wasmcni's link) stays, with a
//! warning. Directories stay (they may have been there before install).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::install::{self, backup};

/// What `wasmcni uninstall` removes (its command line): the same paths
/// `wasmcni install` was given.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// The CNI bin dir install made (e.g. /opt/cni/bin).
    pub dir: PathBuf,
    /// Where install put third-party plugins (default: $WASMCNI_PLUGIN_DIR,
    /// else /opt/wasmcni/plugins).
    #[arg(long, value_name = "DIR")]
    pub plugin_dir: Option<PathBuf>,
    /// Where install put policy entries (default: $WASMCNI_POLICY_DIR, else
    /// /etc/wasmcni/policy.d).
    #[arg(long, value_name = "DIR")]
    pub policy_dir: Option<PathBuf>,
    /// Where install put network configurations (default: /etc/cni/net.d).
    #[arg(long, value_name = "DIR")]
    pub conf_dir: Option<PathBuf>,
    /// Where install put the policy file (default: $WASMCNI_POLICY, else
    /// /etc/wasmcni/policy.json): the records of its directory are read.
    #[arg(long, value_name = "PATH")]
    pub policy_target: Option<PathBuf>,
}

/// Removes what install wrote under `opts`' paths and restores what it
/// replaced; warns of what it leaves.
pub fn run(opts: &Options) -> anyhow::Result<()> {
    let mut left = 0;
    // The network configurations first: a runtime stops using a network
    // before its plugins go.
    let conf_dir = opts
        .conf_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(install::DEFAULT_CONF_DIR));
    let policy_target = opts.policy_target.clone().unwrap_or_else(|| {
        crate::config::get()
            .policy
            .clone()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from(crate::policy::DEFAULT_POLICY_FILE))
    });
    let mut dirs = vec![conf_dir];
    dirs.extend(
        policy_target
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_owned),
    );
    dirs.push(
        opts.policy_dir
            .clone()
            .or_else(crate::policy::policy_dir)
            .unwrap_or_else(|| PathBuf::from(crate::policy::DEFAULT_POLICY_DIR)),
    );
    dirs.push(
        opts.plugin_dir
            .clone()
            .unwrap_or_else(crate::plugins::plugin_dir),
    );
    let mut seen = Vec::new();
    for dir in dirs {
        let key = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        left += remove_recorded(&dir)?;
    }
    left += remove_bin_dir(&opts.dir)?;
    if left > 0 {
        eprintln!(
            "wasmcni: warning: {left} file(s) left in place (see above): they are not \
             install's, or were changed since it wrote them"
        );
    }
    Ok(())
}

/// Removes (or restores the backup over) each file `dir`'s record lists
/// that still has its recorded bytes, then the record. Returns how many
/// files it left.
fn remove_recorded(dir: &Path) -> anyhow::Result<usize> {
    let record = install::Record::load(dir)?;
    let mut left = 0;
    // Files changed since install wrote them: counted and said once, here.
    let mut edited = Vec::new();
    for (name, sha) in record.files() {
        let path = dir.join(name);
        let meta = match fs::symlink_metadata(&path) {
            Ok(m) => m,
            // Gone already (removed by hand): its backup, if any, comes
            // back with the rest.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("inspecting {path:?}")),
        };
        let unchanged = meta.is_file()
            && fs::read(&path)
                .map(|b| install::sha256_hex(&b) == *sha)
                .with_context(|| format!("reading {path:?}"))?;
        if !unchanged {
            eprintln!(
                "wasmcni: warning: {} was changed since install wrote it: left alone",
                path.display()
            );
            left += 1;
            edited.push(name.clone());
            continue;
        }
        restore_or_remove(dir, name)?;
    }
    left += restore_rest(dir, &edited)?;
    let record_path = dir.join(install::OWNED_RECORD);
    match fs::remove_file(&record_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {record_path:?}")),
    }
    Ok(left)
}

/// In the bin dir: the links to wasmcni, wasmcni itself (each replaced by
/// its backup, if `--force` kept one), the artifact cache, then the
/// backups left. Returns how many it left.
fn remove_bin_dir(dir: &Path) -> anyhow::Result<usize> {
    let mut names: Vec<String> = match fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .filter(|n| !n.starts_with('.'))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {dir:?}")),
    };
    names.sort();
    for name in &names {
        let path = dir.join(name);
        let ours = match name.as_str() {
            crate::plugins::SELF_NAME => install::is_wasmcni(&path)?,
            _ => fs::read_link(&path).is_ok_and(|t| t == Path::new(crate::plugins::SELF_NAME)),
        };
        if ours {
            restore_or_remove(dir, name)?;
        }
    }
    let cache = dir.join(".wasmcni-cache");
    if let Ok(entries) = fs::read_dir(&cache) {
        for path in entries.flatten().map(|e| e.path()) {
            if path.extension().is_some_and(|e| e == "cwasm" || e == "ok") {
                fs::remove_file(&path).with_context(|| format!("removing {path:?}"))?;
            }
        }
        match fs::remove_dir(&cache) {
            Ok(()) => println!("{}: removed", cache.display()),
            Err(_) => eprintln!(
                "wasmcni: warning: {} holds files that are not wasmcni's artifacts: left alone",
                cache.display()
            ),
        }
    }
    restore_rest(dir, &[])
}

/// Puts `dir/name`'s backup back over it, else removes it.
fn restore_or_remove(dir: &Path, name: &str) -> anyhow::Result<()> {
    let path = dir.join(name);
    match backup::restore(dir, name)? {
        Some(b) => println!(
            "{}: restored what install replaced (from {})",
            path.display(),
            b.display()
        ),
        None => {
            fs::remove_file(&path).with_context(|| format!("removing {path:?}"))?;
            println!("{}: removed", path.display());
        }
    }
    Ok(())
}

/// `dir/name` is gone: its backup, if any, comes back.
fn restore_or_keep(dir: &Path, name: &str, left: &mut usize) -> anyhow::Result<()> {
    if fs::symlink_metadata(dir.join(name)).is_err() {
        if let Some(b) = backup::restore(dir, name)? {
            println!(
                "{}: restored what install replaced (from {})",
                dir.join(name).display(),
                b.display()
            );
        }
    } else if backup::has(dir, name) {
        eprintln!(
            "wasmcni: warning: {} is not install's (it was replaced since): its backup {} is \
             left in place",
            dir.join(name).display(),
            backup::path(dir, name).display()
        );
        *left += 1;
    }
    Ok(())
}

/// The backups in `dir` not restored yet: each comes back where its name
/// is free; one whose name something else took stays. Returns how many
/// stay, but for those of `said` (files already counted as left).
fn restore_rest(dir: &Path, said: &[String]) -> anyhow::Result<usize> {
    let mut left = 0;
    for name in backup::names(dir).into_iter().filter(|n| !said.contains(n)) {
        restore_or_keep(dir, &name, &mut left)?;
    }
    backup::tidy(dir);
    Ok(left)
}
