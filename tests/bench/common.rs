//! What the benchmarks share: one side of a comparison (a node namespace,
//! a container namespace, a data dir, a plugin dir) and libcni calls
//! through it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::json;

use super::support;
use support::cni::Call;
use support::Netns;

/// The median (of a non-empty list).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// A number from the environment, else `d`.
pub fn env_num(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

/// One side: a node, a container namespace, a data dir, its plugins.
pub struct Side {
    pub node: Netns,
    pub ctr: Netns,
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
    pub env: Vec<(String, String)>,
}

impl Side {
    /// A side running the plugins in `bin`; `wasm`: wasmcni's, with a
    /// policy file granting host-local the side's data dir, and the audit
    /// log and state root in the side's dir (not the machine's).
    pub fn new(tag: &str, bin: &Path, wasm: bool) -> Side {
        let node = Netns::new(&format!("{tag}n"));
        node.ip(&["link", "set", "lo", "up"]);
        let ctr = Netns::new(&format!("{tag}c"));
        let dir = support::private_tempdir();
        let mut env = vec![];
        if wasm {
            let policy = dir.path().join("policy.json");
            std::fs::write(
                &policy,
                json!({"plugins": {"host-local": {"ipam-roots": [dir.path().join("data")]}}})
                    .to_string(),
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o600)).unwrap();
            env.push(("WASMCNI_POLICY".to_owned(), policy.display().to_string()));
            // The audit log stays on, in its usual place's stead.
            env.push((
                "WASMCNI_AUDIT".to_owned(),
                dir.path().join("audit.jsonl").display().to_string(),
            ));
            env.push((
                "WASMCNI_STATE_DIR".to_owned(),
                dir.path().join("state").display().to_string(),
            ));
        }
        Side {
            node,
            ctr,
            dir,
            bin: bin.to_owned(),
            env,
        }
    }

    /// Writes a conflist into the side's dir.
    pub fn write_conflist(&self, file: &str, v: &serde_json::Value) -> PathBuf {
        let p = self.dir.path().join(file);
        std::fs::write(&p, v.to_string()).unwrap();
        p
    }

    /// One libcni call with CNI_ARGS and capability arguments: (the
    /// libcni call alone, the driver process from exec to exit), in ms.
    /// Panics if it fails.
    #[allow(clippy::too_many_arguments)]
    pub fn call_caps(
        &self,
        cmd: &str,
        conflist: &Path,
        ctr: &Netns,
        cid: &str,
        ifname: &str,
        args: &str,
        capargs: &str,
    ) -> (f64, f64) {
        let t = Instant::now();
        let d = Call {
            node: &self.node,
            bin: &self.bin,
            cmd,
            conflist,
            netns: &ctr.path,
            cid,
            ifname,
            cache: &self.dir.path().join("cache"),
            args,
            capargs,
            env: &self.env,
        }
        .run_setns();
        let ms = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(d.code, 0, "{cmd} {cid}: {d:?}");
        let libcni = d.elapsed_us.expect("the driver's -timing line") as f64 / 1e3;
        (libcni, ms)
    }
}
