//! Installed as a newcomer installs it: `deploy/install.sh` into a prefix, then the README's
//! quick start and kpt example, copied from the README, run from a folder outside the checkout
//! with nothing but the prefix's `bin` on PATH to find the runner.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use krm_runner_tests::{build_dir, free_port, have_tool, runner_binary, scratch};

use krm_runner_tests::repo_root as repo;

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).expect("README.md")
}

/// The ```sh blocks of the README section titled `heading`, in order.
fn shell_blocks(readme: &str, heading: &str) -> Vec<String> {
    let start = readme
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("README has no section {heading:?}"));
    let section = &readme[start + 1..];
    let section = &section[..section[3..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 3)];
    section
        .split("```sh\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap().to_owned())
        .collect()
}

/// The environment a fresh shell of a user with `home` would have, with the prefix on PATH.
struct UserShell {
    home: PathBuf,
    cwd: PathBuf,
    path: String,
    listen: String,
}

impl UserShell {
    fn command(&self, line: &str) -> Command {
        let mut command = Command::new("sh");
        command
            .args(["-c", line])
            .current_dir(&self.cwd)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", &self.path)
            .env("KRM_RUNNER_LISTEN", &self.listen);
        command
    }

    fn run(&self, line: &str) -> Output {
        let output = self.command(line).output().expect("sh");
        assert!(
            output.status.success(),
            "README line failed: {line}\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }
}

/// Kills the server the README's quick start starts, however the test ends.
struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn installed_runner_runs_the_readme_examples_from_any_folder() {
    runner_binary(); // the build the script installs from
    let dir = scratch();
    let home = dir.path().join("home");
    let cwd = dir.path().join("elsewhere");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&cwd).unwrap();
    let port = free_port();
    let shell = UserShell {
        path: format!(
            "{}:{}",
            home.join(".local/bin").display(),
            std::env::var("PATH").unwrap_or_default()
        ),
        home: home.clone(),
        cwd,
        listen: format!("127.0.0.1:{port}"),
    };

    let blocks = shell_blocks(&readme(), "Quick start");
    assert!(
        blocks.len() >= 2,
        "quick start: install + serve, then calls"
    );
    let mut setup = blocks[0].lines().filter(|line| !line.trim().is_empty());
    let install = setup.next().expect("the install line");
    assert!(install.starts_with("deploy/install.sh "), "{install}");
    // As written, but from this test's build instead of a new release build.
    let output = shell.run(&format!(
        "{}/{} --build-dir {}",
        repo().display(),
        install.split('#').next().unwrap().trim(),
        build_dir().display()
    ));
    let installed = home.join(".local/bin/krm-runner");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        installed.display().to_string()
    );
    for plugin in ["builtin", "confighub", "starlark", "exec", "multi", "pod"] {
        let library = home.join(format!(".local/lib/krm-runner/libkrm_plugin_{plugin}.so"));
        assert!(library.is_file(), "{} missing", library.display());
    }
    let plugins = String::from_utf8(shell.run("krm-runner plugins").stdout).unwrap();
    assert!(
        plugins.contains(&format!(
            "{}/.local/lib/krm-runner/libkrm_plugin_builtin.so",
            home.display()
        )),
        "plugins found beside the installed binary: {plugins}"
    );

    let serve = setup.next().expect("the serve line");
    let serve = serve.split('#').next().unwrap().trim();
    assert_eq!(serve, "krm-runner serve");
    // `exec`, so that killing the child kills the runner, not just its shell.
    let server = Serving(
        shell
            .command(&format!("exec {serve}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    wait_for_port(port);

    // The second terminal: every line as written, the README's port replaced by this test's.
    for line in blocks[1].lines().filter(|line| !line.trim().is_empty()) {
        let line = line.replace("127.0.0.1:9445", &shell.listen);
        let output = shell.run(&line);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        if line.contains("--server") {
            let evaluator = if line.contains("krm-runner/identity") {
                "exec"
            } else {
                "builtin"
            };
            assert!(
                stderr.contains(&format!("served by {evaluator} at http://{}", shell.listen)),
                "{line}: {stderr}"
            );
            assert!(stdout.contains("name: demo"), "{line}: {stdout}");
        }
        if line.contains("namespace=prod") {
            assert!(stdout.contains("namespace: prod"), "{line}: {stdout}");
        }
        if line.contains("--resolve") {
            assert!(
                stdout.contains("outcome:         NOT_FOUND"),
                "{line}: {stdout}"
            );
        }
    }
    drop(server);

    if have_tool("kpt") {
        let blocks = shell_blocks(&readme(), "Builtin functions");
        let kpt = blocks
            .iter()
            .flat_map(|block| block.lines())
            .find(|line| line.starts_with("kpt fn eval"))
            .expect("the README's kpt example");
        let kpt = kpt.split("   #").next().unwrap().trim();
        let package = shell.cwd.join("pkg");
        std::fs::create_dir_all(&package).unwrap();
        std::fs::write(
            package.join("cm.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo # kept\n",
        )
        .unwrap();
        shell.run(kpt);
        let written = std::fs::read_to_string(package.join("cm.yaml")).unwrap();
        assert!(written.contains("namespace: prod"), "{kpt}: {written}");
        assert!(written.contains("# kept"), "{written}");
    }
}

#[test]
fn install_script_refuses_an_incomplete_build() {
    let dir = scratch();
    let output = Command::new("sh")
        .arg(repo().join("deploy/install.sh"))
        .args(["--prefix"])
        .arg(dir.path().join("prefix"))
        .arg("--build-dir")
        .arg(dir.path())
        .output()
        .expect("install.sh");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("krm-runner is missing"), "{stderr}");
    assert!(!dir.path().join("prefix").exists(), "nothing installed");
    let output = Command::new("sh")
        .arg(repo().join("deploy/install.sh"))
        .arg("--prefix")
        .output()
        .expect("install.sh");
    assert_eq!(output.status.code(), Some(2), "usage error");
}

fn wait_for_port(port: u16) {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the installed runner did not serve on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
