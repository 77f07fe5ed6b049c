//! A real OCI registry for the tests: Debian's `docker-registry`
//! (distribution 2.8), started with its own storage directory and
//! listening on 127.0.0.1 only, killed on drop. And a "registry" that
//! accepts connections and never answers, for the bounds.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const EXE: &str = "/usr/bin/docker-registry";

/// A registry on loopback.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub host: String,
    dir: tempfile::TempDir,
}

impl Registry {
    /// Starts one and waits (at most 20 s) until it answers `GET /v2/`.
    pub fn start() -> Registry {
        assert!(
            std::path::Path::new(EXE).exists(),
            "{EXE} is missing: `make setup` installs Debian's docker-registry"
        );
        let dir = super::private_tempdir();
        // A free port: bound and released (the registry binds it a moment
        // later; a clash fails the start below, loudly).
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let host = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\n\
                 log:\n  level: error\n  accesslog:\n    disabled: true\n\
                 storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
                 http:\n  addr: {host}\n",
                dir.path().join("data").display()
            ),
        )
        .expect("registry config");
        let log = std::fs::File::create(dir.path().join("registry.log")).expect("log");
        let child = Command::new(EXE)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("starting docker-registry");
        let mut r = Registry { child, host, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if r.answers() {
                return r;
            }
            if let Ok(Some(st)) = r.child.try_wait() {
                panic!("docker-registry exited ({st}): {}", r.log());
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry did not answer: {}",
                r.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn answers(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(&self.host) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let req = format!("GET /v2/ HTTP/1.0\r\nHost: {}\r\n\r\n", self.host);
        let mut out = String::new();
        s.write_all(req.as_bytes()).is_ok()
            && s.read_to_string(&mut out).is_ok()
            && out.starts_with("HTTP/1.")
            && out.contains(" 200 ")
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// The file holding blob `digest` (`sha256:…`) in its storage.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// Stops it (a registry that is down).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A listener on loopback that accepts and never answers: a registry that
/// hangs. Its connections are held until it is dropped.
pub struct Silent {
    /// `127.0.0.1:PORT`.
    pub host: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Silent {
    pub fn start() -> Silent {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.set_nonblocking(true).expect("nonblocking");
        let host = l.local_addr().expect("addr").to_string();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => held.push(s),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Silent {
            host,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
