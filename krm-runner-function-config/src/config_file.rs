//! Reading configuration files and their YAML within bounds, for every file the runner and its
//! plugins read as configuration (the runner's config file, Porch's exec map, FunctionConfig
//! files, the pod cache config, docker config files).
//!
//! A configuration file is a regular file of at most [`MAX_CONFIG_FILE_BYTES`]: a device such
//! as `/dev/zero` would be read forever and a FIFO would block the reader until some writer
//! appears. YAML nests at most [`MAX_YAML_DEPTH`] levels: the YAML parser's work grows with the
//! square of the nesting depth (40,000 nested `[` take seconds), so depth is checked by a
//! streaming pass that stops at the limit before the full parse runs.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// The largest configuration file read. Kubernetes keeps a ConfigMap, where most of these
/// files come from, under 1 MiB.
pub const MAX_CONFIG_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The deepest nesting of collections accepted in configuration YAML. Real configurations,
/// pod templates included, stay under 20.
pub const MAX_YAML_DEPTH: usize = 64;

/// Why a configuration file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{}: no such file or directory", path.display())]
    Missing { path: PathBuf },
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: not a regular file (a {kind})", path.display())]
    NotRegularFile { path: PathBuf, kind: &'static str },
    #[error(
        "{}: larger than {MAX_CONFIG_FILE_BYTES} bytes, the limit for configuration files",
        path.display()
    )]
    TooLarge { path: PathBuf },
    #[error("{}: not UTF-8 text (invalid byte at offset {offset})", path.display())]
    NotText { path: PathBuf, offset: usize },
}

impl ReadError {
    pub fn path(&self) -> &Path {
        match self {
            Self::Missing { path }
            | Self::Io { path, .. }
            | Self::NotRegularFile { path, .. }
            | Self::TooLarge { path }
            | Self::NotText { path, .. } => path,
        }
    }
}

/// Reads a configuration file's bytes: a regular file (links followed) of at most
/// [`MAX_CONFIG_FILE_BYTES`].
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, ReadError> {
    let io_error = |source: io::Error| match source.kind() {
        io::ErrorKind::NotFound => ReadError::Missing {
            path: path.to_owned(),
        },
        _ => ReadError::Io {
            path: path.to_owned(),
            source,
        },
    };
    // Non-blocking, so that opening a FIFO returns at once instead of waiting for a writer;
    // the type is then checked on what was opened, not on what the path named a moment before.
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io_error)?;
    let metadata = file.metadata().map_err(io_error)?;
    let file_type = metadata.file_type();
    if !file_type.is_file() {
        let kind = if file_type.is_dir() {
            "directory"
        } else if file_type.is_fifo() {
            "FIFO"
        } else if file_type.is_char_device() {
            "character device"
        } else if file_type.is_block_device() {
            "block device"
        } else if file_type.is_socket() {
            "socket"
        } else {
            "special file"
        };
        return Err(ReadError::NotRegularFile {
            path: path.to_owned(),
            kind,
        });
    }
    if metadata.len() > MAX_CONFIG_FILE_BYTES {
        return Err(ReadError::TooLarge {
            path: path.to_owned(),
        });
    }
    // The size can change between the check and the read (and /proc files report 0): the read
    // itself is bounded too.
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(MAX_CONFIG_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_error)?;
    if bytes.len() as u64 > MAX_CONFIG_FILE_BYTES {
        return Err(ReadError::TooLarge {
            path: path.to_owned(),
        });
    }
    Ok(bytes)
}

/// Reads a configuration file as UTF-8 text, with the bounds of [`read_bytes`].
pub fn read_text(path: &Path) -> Result<String, ReadError> {
    String::from_utf8(read_bytes(path)?).map_err(|error| ReadError::NotText {
        path: path.to_owned(),
        offset: error.utf8_error().valid_up_to(),
    })
}

/// Why configuration YAML could not be used.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    /// `document` counts from 1; the message leaves it to the caller, who may name it.
    #[error("nested deeper than {MAX_YAML_DEPTH} levels at line {line}, column {column}")]
    TooDeep {
        document: usize,
        line: usize,
        column: usize,
    },
    #[error("{}", with_position(.0))]
    Parse(#[from] yaml_serde::Error),
}

/// So that typed readers (figment's `Format`) can use it as their error.
impl serde::de::Error for YamlError {
    fn custom<T: std::fmt::Display>(message: T) -> Self {
        Self::Parse(yaml_serde::Error::custom(message))
    }
}

/// yaml_serde's message, with the position it leaves out when that is the very start.
fn with_position(error: &yaml_serde::Error) -> String {
    let message = error.to_string();
    match error.location() {
        Some(location) if !message.contains(" at line ") => format!(
            "{message} at line {} column {}",
            location.line(),
            location.column()
        ),
        _ => message,
    }
}

/// Refuses YAML nesting collections deeper than [`MAX_YAML_DEPTH`], stopping there: its cost
/// is bounded by the limit, not by the input's depth. Text that the streaming pass cannot read
/// is left for the full parser, which reports the syntax error with its position.
pub fn check_yaml_depth(text: &str) -> Result<(), YamlError> {
    let mut depth = 0usize;
    let mut document = 0usize;
    for event in saphyr_parser::Parser::new_from_str(text) {
        let (event, span) = match event {
            Ok(event) => event,
            // The scanner refuses flow nesting past 255 levels before emitting their events,
            // and says so only in words.
            Err(error) if error.info() == "recursion limit exceeded" => {
                return Err(YamlError::TooDeep {
                    document: document.max(1),
                    line: error.marker().line(),
                    column: error.marker().col() + 1,
                });
            }
            Err(_) => return Ok(()),
        };
        match event {
            saphyr_parser::Event::DocumentStart(_) => document += 1,
            saphyr_parser::Event::SequenceStart(..) | saphyr_parser::Event::MappingStart(..) => {
                depth += 1;
                if depth > MAX_YAML_DEPTH {
                    return Err(YamlError::TooDeep {
                        document,
                        line: span.start.line(),
                        column: span.start.col() + 1,
                    });
                }
            }
            saphyr_parser::Event::SequenceEnd | saphyr_parser::Event::MappingEnd => {
                depth = depth.saturating_sub(1)
            }
            _ => {}
        }
    }
    Ok(())
}

/// Deserializes one YAML document of configuration, its depth checked first.
pub fn from_yaml<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    check_yaml_depth(text)?;
    Ok(yaml_serde::from_str(text)?)
}

/// Decodes `T` from JSON data (a cluster object, a function's config) as a typed reader
/// expects: a number a field cannot hold is named with its value and what was expected.
///
/// serde_json's own value cannot do this once its `arbitrary_precision` feature is on (the
/// starlark interpreter turns it on for the whole build): a number handed to a typed field that
/// cannot hold it is then refused as "invalid number", without the value. The data goes through
/// a YAML value instead, which serde_json fills with plain numbers.
pub fn from_json_value<T: DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, yaml_serde::Error> {
    let plain: yaml_serde::Value = serde::Deserialize::deserialize(value)
        .map_err(<yaml_serde::Error as serde::de::Error>::custom)?;
    T::deserialize(plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_flow_nesting_is_refused_quickly() {
        for text in ["[".repeat(40_000), format!("a: {}", "{b: ".repeat(100))] {
            let error = from_yaml::<yaml_serde::Value>(&text).unwrap_err();
            assert!(
                matches!(
                    error,
                    YamlError::TooDeep {
                        document: 1,
                        line: 1,
                        ..
                    }
                ),
                "{error}"
            );
        }
    }

    #[test]
    fn deep_block_nesting_is_refused() {
        let text = format!("{}x\n", "- ".repeat(100));
        let error = from_yaml::<yaml_serde::Value>(&text).unwrap_err();
        assert!(
            error.to_string().starts_with("nested deeper than 64"),
            "{error}"
        );
    }

    #[test]
    fn nesting_up_to_the_limit_is_read() {
        let text = format!(
            "{}{}",
            "[".repeat(MAX_YAML_DEPTH),
            "]".repeat(MAX_YAML_DEPTH)
        );
        from_yaml::<yaml_serde::Value>(&text).unwrap();
    }

    #[test]
    fn depth_counts_per_document() {
        let shallow = format!("{}{}", "[".repeat(40), "]".repeat(40));
        let text = format!("{shallow}\n---\n{shallow}\n---\n{}", "[".repeat(70));
        let error = check_yaml_depth(&text).unwrap_err();
        assert!(
            matches!(error, YamlError::TooDeep { document: 3, .. }),
            "{error}"
        );
    }

    #[test]
    fn special_files_are_refused_without_blocking() {
        let error = read_bytes(Path::new("/dev/zero")).unwrap_err();
        assert!(
            matches!(
                error,
                ReadError::NotRegularFile {
                    kind: "character device",
                    ..
                }
            ),
            "{error}"
        );
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let error = read_text(&fifo).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("{}: not a regular file (a FIFO)", fifo.display())
        );
        let error = read_text(dir.path()).unwrap_err();
        assert!(matches!(
            error,
            ReadError::NotRegularFile {
                kind: "directory",
                ..
            }
        ));
    }

    #[test]
    fn large_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.yaml");
        std::fs::write(&big, vec![b'#'; MAX_CONFIG_FILE_BYTES as usize + 1]).unwrap();
        assert!(matches!(read_text(&big), Err(ReadError::TooLarge { .. })));
        let exact = dir.path().join("exact.yaml");
        std::fs::write(&exact, vec![b'#'; MAX_CONFIG_FILE_BYTES as usize]).unwrap();
        assert_eq!(
            read_text(&exact).unwrap().len() as u64,
            MAX_CONFIG_FILE_BYTES
        );
    }

    #[test]
    fn missing_and_non_text_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.yaml");
        assert!(matches!(
            read_text(&missing),
            Err(ReadError::Missing { .. })
        ));
        let binary = dir.path().join("binary.yaml");
        std::fs::write(&binary, b"a: \xff\n").unwrap();
        let error = read_text(&binary).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "{}: not UTF-8 text (invalid byte at offset 3)",
                binary.display()
            )
        );
    }
}
