//! Where plugin libraries are found: the configured `plugin_dirs`, then the folders that belong
//! with the running executable.

use std::path::{Path, PathBuf};

use crate::config::Config;

/// The plugin library file a `plugin:` value names.
pub fn library_file_name(plugin: &str) -> String {
    format!("libkrm_plugin_{}.so", plugin.replace('-', "_"))
}

pub fn locate_plugin(plugin: &str, dirs: &[PathBuf]) -> Result<PathBuf, String> {
    if plugin.contains('/') || plugin.ends_with(".so") {
        let path = PathBuf::from(plugin);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{plugin} does not exist"))
        };
    }
    let file = library_file_name(plugin);
    dirs.iter()
        .map(|dir| dir.join(&file))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            let searched = dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>();
            format!(
                "{plugin} not found in plugin_dirs [{}] (looked for {file})",
                searched.join(", ")
            )
        })
}

/// `plugin_dirs`, then the places an installed or freshly built runner keeps its plugins,
/// relative to the running executable (symbolic links resolved, so a link on PATH to a build
/// folder works): its own folder (a cargo build folder, or an image's `/home/nonroot`), then
/// `<prefix>/lib/krm-runner` for `<prefix>/bin/krm-runner` (what `deploy/install.sh` lays out).
pub fn search_dirs(config: &Config) -> Vec<PathBuf> {
    let mut dirs = config.plugin_dirs.clone();
    if let Ok(exe) = std::env::current_exe() {
        dirs.extend(installed_plugin_dirs(&exe));
    }
    dirs
}

/// The plugin folders that belong with the executable at `exe`.
fn installed_plugin_dirs(exe: &Path) -> Vec<PathBuf> {
    let Some(own) = exe.parent() else {
        return Vec::new();
    };
    let mut dirs = vec![own.to_owned()];
    if let Some(prefix) = own.parent() {
        dirs.push(prefix.join("lib").join(INSTALLED_PLUGIN_FOLDER));
    }
    dirs
}

/// The folder under `<prefix>/lib` holding an installed runner's plugins.
const INSTALLED_PLUGIN_FOLDER: &str = "krm-runner";
