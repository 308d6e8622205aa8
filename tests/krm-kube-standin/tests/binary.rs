//! The `krm-kube-standin` binary: prints where it listens and serves until stopped. Why: a
//! person debugging a test (or a shell-driven test) runs the stand-in by hand.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Duration;

struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn binary_prints_url_and_serves() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Kill(
        Command::new(env!("CARGO_BIN_EXE_krm-kube-standin"))
            .arg("--state-dir")
            .arg(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("a line within 20 s");
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let url = v["url"].as_str().unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert!(std::path::Path::new(v["kubeconfig"].as_str().unwrap()).is_file());
    let addr = url.trim_start_matches("http://").parse().unwrap();
    let (code, body) =
        krm_kube_standin::registry::http_get(addr, "/version", Duration::from_secs(5)).unwrap();
    assert_eq!(code, 200);
    assert!(String::from_utf8_lossy(&body).contains("krm-kube-standin"));
}
