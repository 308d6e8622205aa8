//! Which plugin files have passed abi_stable's layout check against this runner executable.
//!
//! The check walks every type of the plugin ABI on both sides, a quarter of the instructions
//! of a one-shot `krm-runner fn` process. Its answer depends only on the two files, so it is
//! remembered per (executable, library) pair: a marker file named after the two paths holding
//! both files' identities (device, inode, size, modification and change times). Any write to
//! either file changes its change time, and a replaced file has another inode, so a marker
//! that still matches speaks for the very files being loaded. Anything unexpected (no cache
//! folder, an unreadable or foreign marker, a file changed during the load) means checking
//! again, never trusting.

use std::fs::Metadata;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A marker is a few lines; anything longer is not one.
const MAX_MARKER_BYTES: u64 = 1024;

/// Where markers are kept, if anywhere, and the running executable they speak for (read once,
/// not per plugin).
#[derive(Debug, Clone)]
pub struct LayoutChecks {
    kept: Option<Kept>,
}

#[derive(Debug, Clone)]
struct Kept {
    dir: PathBuf,
    executable: PathBuf,
    /// The `executable` line and identity a marker begins with.
    executable_identity: String,
}

impl LayoutChecks {
    /// Markers in `dir` (created when first needed).
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        Self::kept_in(Some(dir.into()))
    }

    /// Markers in the user's cache folder: `$XDG_CACHE_HOME/krm-runner/checked-layouts`, else
    /// `$HOME/.cache/krm-runner/checked-layouts`; with neither set, every load checks.
    pub fn in_user_cache() -> Self {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|dir| Path::new(dir).is_absolute())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|dir| Path::new(dir).is_absolute())
                    .map(|home| Path::new(&home).join(".cache"))
            });
        Self::kept_in(base.map(|base| base.join("krm-runner").join("checked-layouts")))
    }

    /// Nothing is kept without a folder, or when this executable cannot be identified.
    fn kept_in(dir: Option<PathBuf>) -> Self {
        let kept = dir.and_then(|dir| {
            let executable = std::env::current_exe().ok()?;
            let executable_file = std::fs::metadata(&executable).ok()?;
            Some(Kept {
                executable_identity: format!(
                    "executable {}\n{}\n",
                    executable.display(),
                    identity(&executable_file)
                ),
                dir,
                executable,
            })
        });
        Self { kept }
    }

    /// The marker for `library` (whose metadata is `library_file`), if markers are kept.
    pub(crate) fn marker(&self, library: &Path, library_file: &Metadata) -> Option<Marker> {
        let kept = self.kept.as_ref()?;
        let mut paths = std::hash::DefaultHasher::new();
        (&kept.executable, library).hash(&mut paths);
        Some(Marker {
            path: kept.dir.join(format!("{:016x}", paths.finish())),
            identities: format!(
                "{}library {}\n{}\n",
                kept.executable_identity,
                library.display(),
                identity(library_file)
            ),
        })
    }
}

/// One (executable, library) pair's marker.
pub(crate) struct Marker {
    path: PathBuf,
    identities: String,
}

impl Marker {
    /// Whether the check passed for these same files before.
    pub(crate) fn checked_before(&self) -> bool {
        let Ok(file) = std::fs::File::open(&self.path) else {
            return false;
        };
        let mut text = String::new();
        file.take(MAX_MARKER_BYTES)
            .read_to_string(&mut text)
            .is_ok()
            && text == self.identities
    }

    /// Records that the check passed. A marker that cannot be written costs only the next
    /// check; a torn one never matches.
    pub(crate) fn remember(&self) {
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::write(&self.path, &self.identities);
    }

    /// Whether `library_file` is still the file this marker was made for.
    pub(crate) fn still_describes(&self, library_file: &Metadata) -> bool {
        self.identities
            .ends_with(&format!("{}\n", identity(library_file)))
    }
}

fn identity(file: &Metadata) -> String {
    format!(
        "device {} inode {} size {} modified {}.{:09} changed {}.{:09}",
        file.dev(),
        file.ino(),
        file.size(),
        file.mtime(),
        file.mtime_nsec(),
        file.ctime(),
        file.ctime_nsec()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn library(dir: &Path, bytes: &[u8]) -> (PathBuf, Metadata) {
        let path = dir.join("libplugin.so");
        std::fs::write(&path, bytes).unwrap();
        let metadata = std::fs::metadata(&path).unwrap();
        (path, metadata)
    }

    #[test]
    fn a_remembered_check_speaks_only_for_the_same_files() {
        let dir = std::env::temp_dir().join(format!("krm-layout-checks-{}", std::process::id()));
        let checks = LayoutChecks::in_dir(dir.join("markers"));
        let (path, file) = library(&dir_with(&dir), b"first");
        let marker = checks.marker(&path, &file).unwrap();
        assert!(!marker.checked_before(), "nothing remembered yet");
        marker.remember();
        assert!(checks.marker(&path, &file).unwrap().checked_before());

        // Rewritten in place (same inode): its size and change time differ.
        let (path, rewritten) = library(&dir, b"second, longer");
        assert!(!marker.still_describes(&rewritten));
        assert!(!checks.marker(&path, &rewritten).unwrap().checked_before());

        // A marker of another pair, or a damaged one, is not trusted.
        std::fs::write(&marker.path, "executable /bin/true\n").unwrap();
        assert!(!checks.marker(&path, &rewritten).unwrap().checked_before());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn dir_with(dir: &Path) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        dir.to_owned()
    }
}
