//! The statically linked build (`build-static.sh`) and the `FROM scratch` image
//! (`deploy/Containerfile.wrapper-server`) built with podman.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// The static release build compiles the whole dependency tree on first use.
const BUILD_BOUND: Duration = Duration::from_secs(45 * 60);

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether the ELF executable at `path` names a program interpreter (PT_INTERP), i.e. needs
/// the dynamic loader.
fn has_interpreter(path: &Path) -> bool {
    let elf = std::fs::read(path).unwrap();
    assert_eq!(&elf[..4], b"\x7fELF", "{} is not ELF", path.display());
    assert_eq!(elf[4], 2, "64-bit ELF expected");
    let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    (0..phnum).any(|i| u32_at(phoff + i * phentsize) == 3)
}

struct Podman {
    conf: tempfile::TempDir,
}

impl Podman {
    fn new() -> Self {
        let conf = tempfile::tempdir().unwrap();
        std::fs::write(
            conf.path().join("containers.conf"),
            "[containers]\ndefault_ulimits = []\n",
        )
        .unwrap();
        Self { conf }
    }

    fn command(&self) -> Command {
        let mut command = Command::new("podman");
        command.args(["--runtime=runc", "--cgroup-manager=cgroupfs"]);
        if std::env::var_os("CONTAINERS_CONF").is_none() {
            command.env("CONTAINERS_CONF", self.conf.path().join("containers.conf"));
        }
        command
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        run_bounded(self.command().args(args), Duration::from_secs(300))
    }

    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "podman {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

/// Removes a container and an image when the test ends, however it ends.
struct Cleanup<'a> {
    podman: &'a Podman,
    container: String,
    image: String,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let _ = self.podman.run(&["rm", "-f", "-t", "0", &self.container]);
        let _ = self.podman.run(&["rmi", "-f", &self.image]);
    }
}

#[tokio::test]
async fn static_binaries_run_in_a_scratch_image() {
    let work = tempfile::tempdir().unwrap();
    let context = work.path().join("context");
    let output = run_bounded(
        Command::new(crate_dir().join("build-static.sh")).arg(&context),
        BUILD_BOUND,
    );
    assert!(
        output.status.success(),
        "build-static.sh failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8_lossy(&output.stdout);
    assert_eq!(printed.lines().last(), Some(context.to_str().unwrap()));
    let wrapper = context.join("wrapper-server");
    let probe_binary = context.join("grpc-health-probe");
    for binary in [&wrapper, &probe_binary] {
        assert!(
            !has_interpreter(binary),
            "{} is dynamically linked",
            binary.display()
        );
    }
    if Command::new("ldd").arg("--version").output().is_ok() {
        let ldd = run_bounded(Command::new("ldd").arg(&wrapper), BOUND);
        let text = String::from_utf8_lossy(&ldd.stdout) + String::from_utf8_lossy(&ldd.stderr);
        assert!(
            text.contains("not a dynamic executable") || text.contains("statically linked"),
            "ldd: {text}"
        );
    }
    // The static binaries work on the host.
    let dir = tempfile::tempdir().unwrap();
    let function = script(dir.path(), "fn.sh", "cat\n");
    let served = Wrapper::start_binary(wrapper.to_str().unwrap(), &["/bin/sh", &function]);
    let response = served.call("img", INPUT, None).await.unwrap();
    assert_eq!(response.resource_list, INPUT.as_bytes());
    let probed = run_bounded(
        Command::new(&probe_binary).args(["-addr", &format!("localhost:{}", served.port)]),
        BOUND,
    );
    assert_eq!(probed.status.code(), Some(0), "{probed:?}");
    drop(served);

    if Command::new("podman").arg("--version").output().is_err() {
        missing_tool("podman", "static_binaries_run_in_a_scratch_image");
        return;
    }
    scratch_image(&context).await;
}

async fn scratch_image(context: &Path) {
    let podman = Podman::new();
    let tag = format!("localhost/krm-wrapper-server-test:{}", std::process::id());
    let container = format!("krm-wrapper-server-test-{}", std::process::id());
    let _cleanup = Cleanup {
        podman: &podman,
        container: container.clone(),
        image: tag.clone(),
    };
    let containerfile = crate_dir().join("../../../deploy/Containerfile.wrapper-server");
    podman.ok(&[
        "build",
        "-f",
        containerfile.to_str().unwrap(),
        "-t",
        &tag,
        context.to_str().unwrap(),
    ]);

    // The init container: the image's default command installs into the shared volume.
    let shared = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        shared.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let volume = format!("{}:/wrapper-server-tools", shared.path().display());
    let installed = podman.ok(&["run", "--rm", "--network=none", "-v", &volume, &tag]);
    assert!(
        installed.contains("/wrapper-server-tools/grpc-health-probe"),
        "{installed}"
    );
    for name in ["wrapper-server", "grpc-health-probe"] {
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(shared.path().join(name))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o7777, 0o555, "{name}");
    }

    // The function container: another scratch image (the same one here) running the installed
    // wrapper, with a static busybox as the function, no shell anywhere.
    if !Path::new("/bin/busybox").exists() {
        missing_tool("busybox (busybox-static)", "scratch_image");
        return;
    }
    let port = free_port();
    let published = format!("127.0.0.1:{port}:9446");
    podman.ok(&[
        "run",
        "-d",
        "--name",
        &container,
        "-p",
        &published,
        "-v",
        &format!("{}:/wrapper-server-tools:ro", shared.path().display()),
        "-v",
        "/bin/busybox:/bin/busybox:ro",
        "--entrypoint",
        "/wrapper-server-tools/wrapper-server",
        &tag,
        "--port",
        "9446",
        "--max-request-body-size",
        "6291456",
        "--",
        "/bin/busybox",
        "cat",
    ]);
    // The readiness probe, as the pod template runs it (`localhost` without NSS).
    let until = Instant::now() + BOUND;
    loop {
        let probed = podman.run(&[
            "exec",
            &container,
            "/wrapper-server-tools/grpc-health-probe",
            "-addr",
            "localhost:9446",
        ]);
        if probed.status.success() {
            assert_eq!(String::from_utf8_lossy(&probed.stdout), "status: SERVING\n");
            break;
        }
        assert!(
            Instant::now() < until,
            "probe never succeeded: {probed:?}; logs: {}",
            podman.ok(&["logs", &container])
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let response = call(port, "example.com/busybox-cat", INPUT, None)
        .await
        .unwrap_or_else(|status| panic!("{status:?}; logs: {}", podman.ok(&["logs", &container])));
    assert_eq!(String::from_utf8(response.resource_list).unwrap(), INPUT);
}
