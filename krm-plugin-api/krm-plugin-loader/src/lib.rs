//! The runner's side of krm-runner's plugin ABI: loading evaluator plugin libraries (checked
//! before they are mapped, refused with a reason when they speak another ABI) and building
//! their instances. Only the `krm-runner` host (and tests that embed it) depend on this crate;
//! plugins depend on the SDK, `krm-plugin-api`, alone.

#![deny(missing_docs)]

use std::ffi::{CStr, c_char};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use abi_stable::library::{LibraryError, RawLibrary, lib_header_from_raw_library};
use krm_plugin_api::host::PluginModule;
use krm_plugin_api::{ABI_VERSION, ConfigError, PLUGIN_API_VERSION};
use serde::Deserialize;

pub use krm_plugin_api::host::{
    EvaluatorInstance, EvaluatorSlot, HostCallContext, HostServices, HostSpan, Measurement,
    MeasurementKind, declined_message,
};
pub use layout_checks::LayoutChecks;

mod layout_checks;

/// A plugin as it describes itself.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PluginInfo {
    /// The plugin's name (`Plugin::NAME`).
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// One line on what the plugin does.
    pub description: String,
    /// The plugin ABI it was built for ([`ABI_VERSION`] when it loads).
    pub abi_version: u32,
    /// The version of krm-plugin-api it was built against.
    pub plugin_api_version: String,
    /// Built with `panic = "unwind"`, so the SDK can contain its panics. Plugins built before
    /// this was reported are taken to be.
    #[serde(default = "built_to_unwind")]
    pub panic_unwind: bool,
}

fn built_to_unwind() -> bool {
    true
}

/// Why a library could not be used as a plugin.
#[derive(Debug, thiserror::Error)]
// The fields are what each message names: the file, the plugin, the reason.
#[allow(missing_docs)]
pub enum PluginLoadError {
    /// The dynamic loader refused the file.
    #[error("{path}: cannot load plugin library: {reason}", path = .path.display())]
    Open { path: PathBuf, reason: String },
    /// Refused before loading: not a complete ELF shared library (truncated, damaged or some
    /// other file), which mapping could turn into a crash of the runner.
    #[error("{path}: not a loadable plugin library: {reason}", path = .path.display())]
    Damaged { path: PathBuf, reason: String },
    /// A shared library without the SDK's export.
    #[error("{path}: not a krm-runner plugin (it exports no krm_runner_plugin_info)", path = .path.display())]
    NotAPlugin { path: PathBuf },
    /// The short form of abi_stable's layout report, naming both sides' versions.
    #[error(
        "{path}: plugin {plugin} was built against plugin ABI {their_abi} (krm-plugin-api {their_api}), \
         but this runner speaks plugin ABI {ABI_VERSION} (krm-plugin-api {PLUGIN_API_VERSION}); \
         rebuild the plugin against krm-plugin-api {PLUGIN_API_VERSION} ({detail})",
        path = .path.display()
    )]
    Incompatible {
        path: PathBuf,
        plugin: String,
        their_abi: u32,
        their_api: String,
        detail: String,
    },
    /// The plugin's root module or its description could not be read.
    #[error("{path}: plugin failed to initialise: {reason}", path = .path.display())]
    Init { path: PathBuf, reason: String },
    /// A panic in a plugin built to abort would end the runner instead of failing one call.
    #[error(
        "{path}: plugin {plugin} was built with panic = \"abort\", so any panic in it would end \
         the runner; build it with panic = \"unwind\" (the default: remove `panic = \"abort\"` \
         from its Cargo profile)",
        path = .path.display()
    )]
    AbortsOnPanic { path: PathBuf, plugin: String },
}

/// Checks that `path` is a whole ELF shared library before the dynamic loader maps it: the
/// loader maps segments by their headers, and touching a mapped page past the end of a
/// truncated file raises SIGBUS, which would kill the runner instead of failing the load. Every
/// loadable segment and every section with contents must lie within the file. (A file changed
/// between this check and the load is not covered: plugin files are the operator's.) Returns
/// the file's metadata.
fn check_library_file(path: &Path) -> Result<std::fs::Metadata, String> {
    use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};

    let file = std::fs::File::open(path).map_err(|error| format!("cannot open: {error}"))?;
    let metadata = file
        .metadata()
        .map_err(|error| format!("cannot read: {error}"))?;
    if !metadata.is_file() {
        return Err("not a regular file".to_owned());
    }
    let length = metadata.len();
    let cache = object::ReadCache::new(file);
    // Only the headers are read: the symbol tables a full parse reads are megabytes in a large
    // plugin, and this check runs on every start-up.
    let incomplete = |error: object::Error| format!("not a complete ELF file ({error})");
    let header =
        object::elf::FileHeader64::<object::Endianness>::parse(&cache).map_err(incomplete)?;
    let endian = header.endian().map_err(incomplete)?;
    let kind = header.e_type(endian);
    if kind != object::elf::ET_DYN {
        return Err(format!("an ELF file of type {kind}, not a shared library"));
    }
    let truncated = |what: &dyn Fn() -> String, (offset, size): (u64, u64)| {
        let end = offset.saturating_add(size);
        (end > length).then(|| {
            format!(
                "truncated: {} ends at byte {end}, but the file has {length} bytes",
                what()
            )
        })
    };
    let sections = header.sections(endian, &cache).map_err(incomplete)?;
    let segments = header.program_headers(endian, &cache).map_err(incomplete)?;
    for (index, segment) in segments.iter().enumerate() {
        let range = segment.file_range(endian);
        if let Some(problem) = truncated(&|| format!("loadable segment {index}"), range) {
            return Err(problem);
        }
    }
    for section in sections.iter() {
        if let Some(range) = section.file_range(endian) {
            let name = || {
                let name = sections.section_name(endian, section).unwrap_or(b"?");
                String::from_utf8_lossy(name).into_owned()
            };
            if let Some(problem) = truncated(&|| format!("section {}", name()), range) {
                return Err(problem);
            }
        }
    }
    Ok(metadata)
}

/// A loaded plugin library. Libraries are never unloaded: evaluators and their threads may
/// outlive any handle to them.
pub struct PluginLibrary {
    path: PathBuf,
    info: PluginInfo,
    module: PluginModule,
    /// abi_stable's layout check was skipped, remembered as passed for these same files.
    layout_check_remembered: bool,
    /// Plugins built before config schemas were exported have none.
    config_schema: Option<extern "C" fn() -> *const c_char>,
}

impl PluginLibrary {
    /// Loads the library at `path`, checks that it speaks this runner's ABI and initialises it.
    /// Each file is loaded through its own library header, so any number of plugins coexist.
    /// abi_stable's layout check is skipped when `checks` remembers it passing for these same
    /// files, and remembered when it passes.
    pub fn load(path: &Path, checks: &LayoutChecks) -> Result<Self, PluginLoadError> {
        let file = check_library_file(path).map_err(|reason| PluginLoadError::Damaged {
            path: path.to_owned(),
            reason,
        })?;
        let marker = checks.marker(path, &file);
        let raw = RawLibrary::load_at(path).map_err(|error| PluginLoadError::Open {
            path: path.to_owned(),
            reason: short_library_error(&error),
        })?;
        let info = read_info(&raw, path)?;
        // SAFETY: looked up by name and typed as the SDK's export macro defines it.
        let config_schema = unsafe {
            raw.get::<extern "C" fn() -> *const c_char>(b"krm_runner_plugin_config_schema\0")
        }
        .ok()
        .map(|symbol| *symbol);
        if !info.panic_unwind {
            return Err(PluginLoadError::AbortsOnPanic {
                path: path.to_owned(),
                plugin: format!("{} {}", info.name, info.version),
            });
        }
        // SAFETY: `raw` exports the SDK's root-module header (checked by `read_info`); the
        // header's layout and version checks are abi_stable's, and the library stays mapped
        // (forgotten below) for as long as the header is used.
        let header = unsafe { lib_header_from_raw_library(&raw) }
            .map_err(|error| incompatible(path, &info, short_library_error(&error)))?;
        // Keep the library mapped for the life of the process.
        std::mem::forget(raw);
        // The marker was made from the file as it was before loading: it is trusted only if
        // the file that was mapped is still that one.
        let checked_before = marker.as_ref().is_some_and(|marker| {
            marker.checked_before()
                && std::fs::metadata(path).is_ok_and(|now| marker.still_describes(&now))
        });
        let module = if checked_before {
            // SAFETY: the layout check passed before for this executable and this library,
            // neither changed since (the marker matches both files' identities, taken before
            // and after mapping).
            unsafe { PluginModule::from_library_header_checked_before(header) }
        } else {
            PluginModule::from_library_header(header)
        }
        .map_err(|error| match error {
            LibraryError::RootModule { err, .. } => PluginLoadError::Init {
                path: path.to_owned(),
                reason: err.to_string(),
            },
            other => incompatible(path, &info, short_library_error(&other)),
        })?;
        if !checked_before && let Some(marker) = &marker {
            marker.remember();
        }
        if info.abi_version != ABI_VERSION {
            return Err(incompatible(path, &info, "ABI version differs".to_owned()));
        }
        let described = module.name();
        if described != info.name {
            return Err(PluginLoadError::Init {
                path: path.to_owned(),
                reason: format!(
                    "plugin describes itself as {:?} through the ABI but {:?} outside it",
                    described, info.name
                ),
            });
        }
        Ok(Self {
            path: path.to_owned(),
            info,
            module,
            layout_check_remembered: checked_before,
            config_schema,
        })
    }

    /// The file the plugin was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The plugin as it describes itself.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    /// Whether loading skipped abi_stable's layout check because [`LayoutChecks`] remembered
    /// it passing for these same files.
    pub fn layout_check_remembered(&self) -> bool {
        self.layout_check_remembered
    }

    /// The JSON schema of the plugin's `config:` section; `None` from a plugin built before
    /// schemas were exported.
    pub fn config_schema(&self) -> Option<serde_json::Value> {
        let describe = self.config_schema?;
        // SAFETY: the export macro returns a pointer to a static NUL-terminated string.
        let text = unsafe { CStr::from_ptr(describe()) }.to_string_lossy();
        serde_json::from_str(&text).ok()
    }

    /// Builds the instance `instance` from its `config:` section (JSON text). The error holds
    /// every problem the plugin reported, each naming the field at fault.
    pub fn build(
        &self,
        instance: &str,
        config_json: &str,
        services: Arc<dyn HostServices>,
    ) -> Result<EvaluatorInstance, ConfigError> {
        self.module
            .build(&self.info.name, instance, config_json, services)
    }
}

fn read_info(raw: &RawLibrary, path: &Path) -> Result<PluginInfo, PluginLoadError> {
    // SAFETY: the symbol is looked up by name and typed as the SDK's export macro defines it
    // (`extern "C" fn() -> *const c_char`); a library without it is refused as not a plugin.
    let describe =
        unsafe { raw.get::<extern "C" fn() -> *const c_char>(b"krm_runner_plugin_info\0") }
            .map_err(|_| PluginLoadError::NotAPlugin {
                path: path.to_owned(),
            })?;
    // SAFETY: the export macro returns a pointer to a static NUL-terminated string.
    let text = unsafe { CStr::from_ptr(describe()) }
        .to_string_lossy()
        .into_owned();
    serde_json::from_str(&text).map_err(|error| PluginLoadError::Init {
        path: path.to_owned(),
        reason: format!("unreadable plugin description {text:?}: {error}"),
    })
}

fn incompatible(path: &Path, info: &PluginInfo, detail: String) -> PluginLoadError {
    PluginLoadError::Incompatible {
        path: path.to_owned(),
        plugin: format!("{} {}", info.name, info.version),
        their_abi: info.abi_version,
        their_api: info.plugin_api_version.clone(),
        detail,
    }
}

/// abi_stable's errors can run to hundreds of lines (a full layout diff); keep the first line.
fn short_library_error(error: &LibraryError) -> String {
    let text = match error {
        LibraryError::AbiInstability(_) => {
            let full = error.to_string();
            let first = full
                .lines()
                .find(|line| !line.trim().is_empty())
                .unwrap_or("");
            format!("abi_stable: type layouts differ: {}", first.trim())
        }
        other => other.to_string(),
    };
    let mut line = text.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    if line.len() > 300 {
        let cut = (0..=300)
            .rev()
            .find(|i| line.is_char_boundary(*i))
            .unwrap_or(0);
        line.truncate(cut);
        line.push_str("...");
    }
    line
}
