//! Where plugin libraries are found: the configured `plugin_dirs`, then the folders that belong
//! with the running executable.

use std::path::PathBuf;

use crate::config::{self, Config};

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

/// `plugin_dirs`, then the places an installed or freshly built runner keeps its plugins
/// ([`config::installed_dirs`]).
pub fn search_dirs(config: &Config) -> Vec<PathBuf> {
    let mut dirs = config.plugin_dirs.clone();
    dirs.extend(config::installed_dirs());
    dirs
}
