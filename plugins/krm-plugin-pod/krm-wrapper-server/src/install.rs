//! `wrapper-server install DIR`: copies the wrapper server and the health probe next to it into
//! DIR (an emptyDir shared with the function container), for init containers without a shell
//! or `cp`.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The probe's file name, next to the wrapper server in the image and in the shared volume.
pub const PROBE_NAME: &str = "grpc-health-probe";
/// The wrapper server's file name in the shared volume.
pub const WRAPPER_NAME: &str = "wrapper-server";

/// Copies `wrapper` and the probe beside it into `dir` (created if needed) as
/// `dir/wrapper-server` and `dir/grpc-health-probe`, mode 0555. Each file is written under a
/// temporary name and renamed, so a reader never sees a partial binary.
pub fn install(wrapper: &Path, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let source_dir = wrapper.parent().unwrap_or(Path::new("."));
    let probe = source_dir.join(PROBE_NAME);
    if !probe.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{} not found next to {}",
                probe.display(),
                wrapper.display()
            ),
        ));
    }
    fs::create_dir_all(dir).map_err(|e| annotate(e, "cannot create", dir))?;
    let mut installed = Vec::new();
    for (source, name) in [(wrapper, WRAPPER_NAME), (probe.as_path(), PROBE_NAME)] {
        let target = dir.join(name);
        let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let copy = || -> io::Result<()> {
            fs::copy(source, &temporary).map_err(|e| annotate(e, "cannot copy", source))?;
            fs::set_permissions(&temporary, fs::Permissions::from_mode(0o555))?;
            fs::rename(&temporary, &target).map_err(|e| annotate(e, "cannot write", &target))
        };
        if let Err(error) = copy() {
            let _ = fs::remove_file(&temporary);
            return Err(error);
        }
        installed.push(target);
    }
    Ok(installed)
}

fn annotate(error: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(error.kind(), format!("{what} {}: {error}", path.display()))
}
