//! Turning a module file into something a call instantiates: read within bounds, checked to be
//! a WASI command module, compiled once per content and engine, the compiled form kept on disk.
//!
//! A compiled module is keyed by the SHA-256 digest of the module's bytes and a digest of
//! wasmtime's own compatibility hash ([`Engine::precompile_compatibility_hash`]: wasmtime's
//! version, the compiler's settings, the CPU features it compiles for). A key that differs in
//! any of them names another file, so a changed module, an upgraded runner or another CPU
//! compiles anew; wasmtime checks the same when it deserializes, and a file it refuses is
//! compiled again and replaced.

use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use krm_runner_function_config::private_folder::{hex, private_folder};
use sha2::{Digest, Sha256};
use wasmtime::{Engine, InstancePre, Linker, Module};

use crate::run::CallState;

/// Why a module cannot be served. `module` names it: its file, or the image it was pulled as.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CompileError {
    #[error("cannot read module {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("module {} is larger than {limit} bytes (max_module_mib)", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{module} is not a WebAssembly module wasmtime accepts: {source:#}")]
    Invalid {
        module: String,
        #[source]
        source: anyhow::Error,
    },
    /// A module built for kpt's alpha form (Go's `GOOS=js`, driven through a JavaScript shim)
    /// rather than as a WASI command.
    #[error(
        "module {module} imports {import:?}: built with GOOS=js for kpt's JavaScript shim; \
         build a WASI command instead (GOOS=wasip1, wasm32-wasip1, wasi-libc)"
    )]
    GoJs { module: String, import: String },
    #[error(
        "module {module} is not a WASI preview 1 command: it exports no `_start` function \
         taking and returning nothing"
    )]
    NotACommand { module: String },
    /// An import the sandbox does not provide (only `wasi_snapshot_preview1` is linked).
    #[error("module {module} cannot be linked: {source:#}")]
    Link {
        module: String,
        #[source]
        source: anyhow::Error,
    },
}

/// Where a compiled module came from, for the log and the tests' understanding of timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    Compiled,
    Cache,
}

/// Compiles modules for one engine, keeping the compiled forms in `cache_dir`.
pub(crate) struct Compiler {
    engine: Engine,
    linker: Linker<CallState>,
    /// A folder only the runner's user can write; `None`: compiled forms stay in memory.
    cache_dir: Option<PathBuf>,
    /// The engine's part of every cache key.
    engine_key: String,
    max_module_bytes: u64,
}

impl Compiler {
    pub(crate) fn new(
        engine: Engine,
        linker: Linker<CallState>,
        cache_dir: Option<PathBuf>,
        max_module_bytes: u64,
    ) -> Self {
        let cache_dir = cache_dir.and_then(|dir| match private_folder(&dir) {
            Ok(()) => Some(dir),
            Err(problem) => {
                tracing::warn!(
                    cache_dir = %dir.display(),
                    "{problem}; compiled modules are kept in memory only"
                );
                None
            }
        });
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = hex(&hasher.0.finalize()[..16]);
        Self {
            engine,
            linker,
            cache_dir,
            engine_key,
            max_module_bytes,
        }
    }

    /// The module at `path`, compiled (or loaded compiled) and linked against the sandbox.
    pub(crate) fn load(
        &self,
        path: &Path,
    ) -> Result<(InstancePre<CallState>, Origin), CompileError> {
        let bytes = read_bounded(path, self.max_module_bytes)?;
        self.load_bytes(&path.display().to_string(), &bytes)
    }

    /// The module `bytes` (named `module` in errors), compiled (or loaded compiled) and linked
    /// against the sandbox.
    pub(crate) fn load_bytes(
        &self,
        module: &str,
        bytes: &[u8],
    ) -> Result<(InstancePre<CallState>, Origin), CompileError> {
        let (compiled, origin) = self.module(module, bytes)?;
        check_command(module, &compiled)?;
        let pre = self
            .linker
            .instantiate_pre(&compiled)
            .map_err(|source| CompileError::Link {
                module: module.to_owned(),
                source,
            })?;
        Ok((pre, origin))
    }

    /// The largest module read, in bytes (`max_module_mib`).
    pub(crate) fn max_module_bytes(&self) -> u64 {
        self.max_module_bytes
    }

    fn module(&self, name: &str, bytes: &[u8]) -> Result<(Module, Origin), CompileError> {
        let invalid = |source| CompileError::Invalid {
            module: name.to_owned(),
            source,
        };
        let Some(dir) = &self.cache_dir else {
            let module = Module::from_binary(&self.engine, bytes).map_err(invalid)?;
            return Ok((module, Origin::Compiled));
        };
        let digest = hex(&Sha256::digest(bytes));
        let cached = dir.join(format!("{digest}-{}.cwasm", self.engine_key));
        if cached.is_file() {
            // SAFETY: wasmtime runs what it deserializes as machine code, so the file must be
            // one `Module::serialize` wrote for a compatible engine. It is: the folder belongs
            // to the runner's user and no one else can write it (`private_folder`), files
            // appear in it only whole (written aside, then renamed), and its name carries the
            // module's digest and the engine's compatibility hash; wasmtime itself refuses a
            // file of another version or configuration, which is then compiled anew.
            match unsafe { Module::deserialize_file(&self.engine, &cached) } {
                Ok(module) => return Ok((module, Origin::Cache)),
                Err(error) => tracing::warn!(
                    file = %cached.display(),
                    "compiled module refused ({error:#}); compiling it again"
                ),
            }
        }
        let module = Module::from_binary(&self.engine, bytes).map_err(invalid)?;
        if let Err(error) = store(dir, &cached, &module) {
            tracing::warn!(
                file = %cached.display(),
                "cannot keep the compiled module ({error:#}); it will be compiled again next start"
            );
        }
        Ok((module, Origin::Compiled))
    }
}

/// Writes `module`'s compiled form to `path`, whole or not at all.
fn store(dir: &Path, path: &Path, module: &Module) -> anyhow::Result<()> {
    let serialized = module.serialize()?;
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(&serialized)?;
    file.as_file().sync_data()?;
    file.persist(path)?;
    Ok(())
}

fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, CompileError> {
    let read = |source| CompileError::Read {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(read)?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).map_err(read)?;
    if bytes.len() as u64 > limit {
        return Err(CompileError::TooLarge {
            path: path.to_owned(),
            limit,
        });
    }
    Ok(bytes)
}

/// Refuses a module that is not a WASI command, naming kpt's `GOOS=js` form when it is that.
fn check_command(name: &str, module: &Module) -> Result<(), CompileError> {
    if let Some(import) = module
        .imports()
        .find(|import| matches!(import.module(), "gojs" | "go"))
    {
        return Err(CompileError::GoJs {
            module: name.to_owned(),
            import: format!("{}.{}", import.module(), import.name()),
        });
    }
    let is_command = module
        .get_export("_start")
        .and_then(|export| export.func().cloned())
        .is_some_and(|func| func.params().len() == 0 && func.results().len() == 0);
    if !is_command {
        return Err(CompileError::NotACommand {
            module: name.to_owned(),
        });
    }
    Ok(())
}

/// Feeds what a `Hash` implementation writes into SHA-256, so that the digest is the same in
/// every process (std's hashers are only stable within one).
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(
            digest[..8]
                .try_into()
                .expect("a SHA-256 digest has 32 bytes"),
        )
    }
}
