//! Installed as a newcomer installs it: `deploy/install.sh` into a prefix, then the README's
//! quick start (its output as quoted) and the kpt example of docs/functions.md, copied from the
//! docs, run from a folder outside the checkout with nothing but the prefix's `bin` on PATH to
//! find the runner. The install is stripped, within its size bound, and routes by the shipped
//! FunctionConfigs from any folder.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use krm_runner_tests::{build_dir, free_port, have_tool, runner_binary, scratch};

use krm_runner_tests::repo_root as repo;

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).expect("README.md")
}

/// The blocks fenced as ````language` of the README section titled `heading`, in order.
fn blocks(readme: &str, heading: &str, language: &str) -> Vec<String> {
    let start = readme
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("README has no section {heading:?}"));
    let section = &readme[start + 1..];
    let section = &section[..section[3..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 3)];
    section
        .split(&format!("```{language}\n"))
        .skip(1)
        .map(|block| block.split("```").next().unwrap().to_owned())
        .collect()
}

/// What `deploy/install.sh` may leave in a prefix: 115 MB from a release build (what it makes
/// without `--build-dir`). A debug build's files are larger, their dependencies less optimised.
fn size_bound(build: &Path) -> u64 {
    // The wasm plugin carries wasmtime and its Cranelift compiler: 21 MB of the release install
    // (109.7 MB measured), about 48 MB of the debug one.
    if build.ends_with("release") {
        115_000_000
    } else {
        175_000_000
    }
}

/// The bytes the files under `dir` take on disk, as `du` counts them.
fn disk_usage(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let metadata = entry.metadata().unwrap();
        total += if metadata.is_dir() {
            disk_usage(&entry.path())
        } else {
            metadata.blocks() * 512
        };
    }
    total
}

/// The names of the sections of the ELF file at `path` (64-bit, little-endian).
fn elf_sections(path: &Path) -> Vec<String> {
    let elf = std::fs::read(path).unwrap();
    let word = |at: usize, size: usize| -> usize {
        let mut value = 0usize;
        for (i, byte) in elf[at..at + size].iter().enumerate() {
            value |= usize::from(*byte) << (8 * i);
        }
        value
    };
    assert_eq!(&elf[..4], b"\x7fELF", "{} is not ELF", path.display());
    let (table, entry_size, count, names_index) =
        (word(0x28, 8), word(0x3a, 2), word(0x3c, 2), word(0x3e, 2));
    let header = |index: usize| table + index * entry_size;
    let names = word(header(names_index) + 0x18, 8);
    (0..count)
        .map(|index| {
            let name = names + word(header(index), 4);
            let end = elf[name..].iter().position(|byte| *byte == 0).unwrap();
            String::from_utf8_lossy(&elf[name..name + end]).into_owned()
        })
        .collect()
}

/// The installed executables and plugins under `prefix`.
fn installed_binaries(prefix: &Path) -> Vec<PathBuf> {
    let mut binaries = vec![
        prefix.join("bin/krm-runner"),
        prefix.join("bin/krm-runner-server"),
    ];
    for plugin in [
        "builtin",
        "confighub",
        "starlark",
        "exec",
        "wasm",
        "multi",
        "pod",
    ] {
        binaries.push(prefix.join(format!("lib/krm-runner/libkrm_plugin_{plugin}.so")));
    }
    binaries
}

/// How many FunctionConfigs the shipped files hold.
fn shipped_function_configs() -> usize {
    std::fs::read_dir(repo().join("config/functions"))
        .unwrap()
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        .map(|text| text.matches("\nkind: FunctionConfig\n").count())
        .sum()
}

/// The environment a fresh shell of a user with `home` would have.
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
    // A fresh machine's PATH: the prefix's bin folder is not on it until the README puts it.
    let shell = UserShell {
        path: std::env::var("PATH").unwrap_or_default(),
        home: home.clone(),
        cwd,
        listen: format!("127.0.0.1:{port}"),
    };

    let readme = readme();
    let blocks = blocks(&readme, "Quick start", "sh");
    assert!(
        blocks.len() >= 2,
        "quick start: the two commands, then calls"
    );
    // The two commands: install and serve, and every test.
    let mut commands = blocks[0]
        .lines()
        .map(|line| line.split('#').next().unwrap().trim())
        .filter(|line| !line.is_empty());
    let (install, serve) = commands
        .next()
        .and_then(|line| line.split_once(" && "))
        .expect("the install && serve line");
    assert_eq!(install, "deploy/install.sh");
    assert_eq!(commands.next(), Some("tests/run.sh"));
    assert!(repo().join("tests/run.sh").is_file());
    // As written, but from this test's build instead of a new release build.
    let output = shell.run(&format!(
        "{}/{install} --build-dir {}",
        repo().display(),
        build_dir().display()
    ));
    let prefix = home.join(".local");
    let installed = prefix.join("bin/krm-runner");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        installed.display().to_string()
    );
    for binary in installed_binaries(&prefix) {
        assert!(binary.is_file(), "{} missing", binary.display());
        let sections = elf_sections(&binary);
        assert!(
            !sections
                .iter()
                .any(|name| [".debug_info", ".debug_line"].contains(&name.as_str())),
            "{} keeps its debug info: {sections:?}",
            binary.display()
        );
        assert!(
            !binary.with_extension("debug").exists()
                && !sections.contains(&".gnu_debuglink".into()),
            "debug info installed without --debug-info"
        );
    }
    let size = disk_usage(&prefix);
    assert!(
        size <= size_bound(&build_dir()),
        "deploy/install.sh left {size} bytes in the prefix, more than {}",
        size_bound(&build_dir())
    );

    // The shipped FunctionConfigs are installed beside the plugins, and the installed runner
    // finds them from any folder.
    let check = shell.run(&format!("{} config check", installed.display()));
    assert_eq!(
        String::from_utf8_lossy(&check.stdout).trim(),
        format!(
            "configuration OK; {} FunctionConfigs OK",
            shipped_function_configs()
        )
    );
    assert!(
        !String::from_utf8_lossy(&check.stderr).contains("WARN"),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let plugins = String::from_utf8(
        shell
            .run(&format!("{} plugins", installed.display()))
            .stdout,
    )
    .unwrap();
    assert!(
        plugins.contains(&format!(
            "{}/.local/lib/krm-runner/libkrm_plugin_builtin.so",
            home.display()
        )),
        "plugins found beside the installed binary: {plugins}"
    );

    assert_eq!(serve, "~/.local/bin/krm-runner serve");
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

    // The second terminal: every line as written, the README's port replaced by this test's;
    // what it exports holds for the lines after it.
    let mut exports = String::new();
    for line in blocks[1].lines().filter(|line| !line.trim().is_empty()) {
        let line = line.replace("127.0.0.1:9445", &shell.listen);
        if line.starts_with("export ") {
            exports.push_str(&line);
            exports.push('\n');
            continue;
        }
        let output = shell.run(&format!("{exports}{line}"));
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
            // As the README quotes it, the home folder written `~`.
            let quoted = blocks_quoting(&readme, &line);
            let printed = stdout.replace(&home.display().to_string(), "~");
            assert_eq!(printed, quoted, "{line}");
        }
    }
    drop(server);

    if have_tool("kpt") {
        let functions = std::fs::read_to_string(repo().join("docs/functions.md")).unwrap();
        let kpt = functions
            .split("```sh\n")
            .skip(1)
            .filter_map(|block| block.split("```").next())
            .flat_map(str::lines)
            .find(|line| line.starts_with("kpt fn eval"))
            .expect("the kpt example of docs/functions.md");
        let kpt = kpt.split("   #").next().unwrap().trim();
        let package = shell.cwd.join("pkg");
        std::fs::create_dir_all(&package).unwrap();
        std::fs::write(
            package.join("cm.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo # kept\n",
        )
        .unwrap();
        shell.run(&format!("{exports}{kpt}"));
        let written = std::fs::read_to_string(package.join("cm.yaml")).unwrap();
        assert!(written.contains("namespace: prod"), "{kpt}: {written}");
        assert!(written.contains("# kept"), "{written}");
    }
}

/// The output the README's quick start quotes for `line` (a ```console block starting with
/// `$ line`).
fn blocks_quoting(readme: &str, line: &str) -> String {
    blocks(readme, "Quick start", "console")
        .into_iter()
        .find_map(|block| {
            block
                .strip_prefix(&format!("$ {line}\n"))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("the quick start quotes no output of {line}"))
}

#[test]
fn debug_info_is_installed_apart_on_request() {
    runner_binary();
    let dir = scratch();
    let prefix = dir.path().join("prefix");
    let output = Command::new("sh")
        .arg(repo().join("deploy/install.sh"))
        .arg("--prefix")
        .arg(&prefix)
        .arg("--build-dir")
        .arg(build_dir())
        .arg("--debug-info")
        .output()
        .expect("install.sh");
    assert!(output.status.success(), "{output:?}");
    for binary in installed_binaries(&prefix) {
        let sections = elf_sections(&binary);
        assert!(
            sections.contains(&".gnu_debuglink".to_owned())
                && !sections
                    .iter()
                    .any(|name| [".debug_info", ".debug_line"].contains(&name.as_str())),
            "{}: {sections:?}",
            binary.display()
        );
        let debug = PathBuf::from(format!("{}.debug", binary.display()));
        assert!(
            elf_sections(&debug).contains(&".debug_line".to_owned()),
            "{} holds no line tables",
            debug.display()
        );
    }
}

/// A runner that is neither installed nor started from a checkout finds no FunctionConfigs,
/// and says so instead of routing nothing in silence.
#[test]
fn a_missing_default_function_config_folder_is_warned_about() {
    let dir = scratch();
    let output = Command::new(runner_binary())
        .args(["--plugin-dir"])
        .arg(build_dir())
        .args(["config", "check"])
        .current_dir(dir.path())
        .output()
        .expect("krm-runner");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(stdout.trim(), "configuration OK; 0 FunctionConfigs OK");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("function_configs.paths: the default config/functions/ does not exist"),
        "{stderr}"
    );
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
