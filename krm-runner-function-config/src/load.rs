//! Reading FunctionConfigs from YAML files, the cluster-less source.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

// The documents are read into YAML values, not JSON ones: with serde_json's
// `arbitrary_precision` (which the starlark interpreter turns on for the whole build), a JSON
// number handed to a typed field that cannot hold it reports only "invalid number", where a YAML
// number lets the field's type name the value and what it expected.
use yaml_serde::Value;

use crate::config_file::{self, ReadError, YamlError};
use crate::source::{Source, Sourced, join};
use crate::types::FunctionConfig;
use crate::validate::FieldError;

const API_VERSION: &str = "config.porch.kpt.dev/v1alpha1";
const KIND: &str = "FunctionConfig";

/// Why a file, or one document in it, yielded no FunctionConfig.
#[derive(Debug, thiserror::Error)]
pub enum FunctionConfigLoadError {
    #[error("{}: no such file or directory", path.display())]
    Missing { path: PathBuf },
    #[error("{}: cannot read: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    /// A file that is not a regular file, too large, not text or unreadable.
    #[error(transparent)]
    File(#[from] ReadError),
    /// The document is not YAML; the rest of the file is not read, as its document boundaries
    /// cannot be trusted any more.
    #[error("{}, document {document}: not valid YAML (rest of the file skipped): {message}", path.display())]
    Yaml {
        path: PathBuf,
        document: usize,
        message: String,
    },
    #[error(
        "{}, document {document}: {found} is not a {API_VERSION} {KIND}",
        path.display()
    )]
    NotFunctionConfig {
        path: PathBuf,
        document: usize,
        /// What the document is instead, e.g. `v1 ConfigMap` or `a list`.
        found: String,
    },
    /// A field of the wrong type, or a required field missing.
    #[error("{}, document {document}: {field}: {message}", path.display())]
    Decode {
        path: PathBuf,
        document: usize,
        field: String,
        message: String,
    },
    /// Unknown fields (typos) and rule violations, all of them.
    #[error("{}, document {document}: {}", path.display(), join(errors))]
    Invalid {
        path: PathBuf,
        document: usize,
        errors: Vec<FieldError>,
    },
}

/// Reads FunctionConfigs from `paths`, each a file or a directory, in the order given.
///
/// A directory contributes its `*.yaml` and `*.yml` files sorted by name, not its
/// subdirectories, and skips names starting with `.`: a mounted ConfigMap keeps its real files
/// under `..data/` and `..<timestamp>/` beside the visible links, which would otherwise be read
/// twice. A file is read whatever its name, and once even when named again or through its
/// directory. Each file may hold several documents; empty
/// documents are skipped. Objects keep the namespace written in the file, usually none.
///
/// Returns the valid objects and, separately, every problem found, each naming its file and
/// document: a missing path, an unreadable file, YAML that does not parse, a document that is
/// not a `config.porch.kpt.dev/v1alpha1` `FunctionConfig`, a field of the wrong type, an unknown
/// field, or a broken rule (see [`crate::validate`]).
pub fn load_paths(paths: &[PathBuf]) -> (Vec<Sourced>, Vec<FunctionConfigLoadError>) {
    let mut loaded = Vec::new();
    let mut errors = Vec::new();
    let mut read = HashSet::new();
    let mut load_once =
        |file: &Path, loaded: &mut Vec<Sourced>, errors: &mut Vec<FunctionConfigLoadError>| {
            // A file named both on its own and through its directory would conflict with itself.
            if read.insert(fs::canonicalize(file).unwrap_or_else(|_| file.to_owned())) {
                load_file(file, loaded, errors);
            }
        };
    for path in paths {
        match fs::metadata(path) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                errors.push(FunctionConfigLoadError::Missing { path: path.clone() })
            }
            Err(source) => errors.push(FunctionConfigLoadError::Read {
                path: path.clone(),
                source,
            }),
            Ok(metadata) if metadata.is_dir() => match yaml_files_in(path) {
                Ok(files) => {
                    for file in files {
                        load_once(&file, &mut loaded, &mut errors);
                    }
                }
                Err(source) => errors.push(FunctionConfigLoadError::Read {
                    path: path.clone(),
                    source,
                }),
            },
            Ok(_) => load_once(path, &mut loaded, &mut errors),
        }
    }
    (loaded, errors)
}

fn yaml_files_in(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let visible = path
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| !name.starts_with('.'));
        let yaml = path
            .extension()
            .is_some_and(|extension| extension == "yaml" || extension == "yml");
        // `is_file` follows links, so linked files count and links to directories do not.
        if visible && yaml && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

fn load_file(path: &Path, loaded: &mut Vec<Sourced>, errors: &mut Vec<FunctionConfigLoadError>) {
    let text = match config_file::read_text(path) {
        Ok(text) => text,
        Err(error) => {
            errors.push(FunctionConfigLoadError::File(error));
            return;
        }
    };
    // The documents before a too deeply nested one are read; that one and the rest are never
    // handed to the full parser, which parses each document as the iterator reaches it.
    let too_deep = config_file::check_yaml_depth(&text).err();
    let mut documents = yaml_serde::Deserializer::from_str(&text);
    for document_number in 1.. {
        if let Some(error @ YamlError::TooDeep { document, .. }) = &too_deep
            && *document == document_number
        {
            errors.push(FunctionConfigLoadError::Yaml {
                path: path.to_owned(),
                document: *document,
                message: error.to_string(),
            });
            return;
        }
        let Some(document) = documents.next() else {
            return;
        };
        let value = match serde::Deserialize::deserialize(document) {
            Ok(Value::Null) => continue,
            Ok(value) => value,
            Err(error) => {
                errors.push(FunctionConfigLoadError::Yaml {
                    path: path.to_owned(),
                    document: document_number,
                    message: YamlError::Parse(error).to_string(),
                });
                return;
            }
        };
        match decode(value, path, document_number) {
            Ok(sourced) => loaded.push(sourced),
            Err(error) => errors.push(*error),
        }
    }
}

fn decode(
    value: Value,
    path: &Path,
    document: usize,
) -> Result<Sourced, Box<FunctionConfigLoadError>> {
    let text_field = |name: &str| value.get(name).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text_field("apiVersion"), text_field("kind"));
    if api_version != API_VERSION || kind != KIND {
        let found = match &value {
            Value::Mapping(_) if api_version.is_empty() && kind.is_empty() => {
                "an object without apiVersion and kind".to_owned()
            }
            Value::Mapping(_) => format!("{api_version} {kind}").trim().to_owned(),
            Value::Sequence(_) => "a list".to_owned(),
            _ => "a scalar".to_owned(),
        };
        return Err(Box::new(FunctionConfigLoadError::NotFunctionConfig {
            path: path.to_owned(),
            document,
            found,
        }));
    }

    let mut unknown = Vec::new();
    let mut note_unknown = |field: serde_ignored::Path<'_>| {
        let field = field_path(&field);
        // The derived root type reads apiVersion and kind by skipping them; they were checked
        // above.
        if field != "apiVersion" && field != "kind" {
            unknown.push(FieldError {
                field,
                message: "unknown field".to_owned(),
            })
        }
    };
    let object: FunctionConfig = serde_path_to_error::deserialize(
        serde_ignored::Deserializer::new(value, &mut note_unknown),
    )
    .map_err(|error| {
        Box::new(FunctionConfigLoadError::Decode {
            path: path.to_owned(),
            document,
            field: error.path().to_string(),
            message: error.into_inner().to_string(),
        })
    })?;

    let source = Source::File {
        path: path.to_owned(),
        document,
    };
    let rule_errors = match Sourced::checked(object, source) {
        Ok(sourced) if unknown.is_empty() => return Ok(sourced),
        Ok(_) => Vec::new(),
        Err(invalid) => invalid.errors,
    };
    unknown.extend(rule_errors);
    Err(Box::new(FunctionConfigLoadError::Invalid {
        path: path.to_owned(),
        document,
        errors: unknown,
    }))
}

/// `spec.podExecutor.templateOverrides.container.env[0].nmae`, the way Kubernetes names fields
/// (serde_ignored's own rendering shows option layers as `?`).
fn field_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path::*;
    match path {
        Root => String::new(),
        Seq { parent, index } => format!("{}[{index}]", field_path(parent)),
        Map { parent, key } => match field_path(parent) {
            parent if parent.is_empty() => key.clone(),
            parent => format!("{parent}.{key}"),
        },
        Some { parent } | NewtypeStruct { parent } | NewtypeVariant { parent } => {
            field_path(parent)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SET_NAMESPACE: &str = "\
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: set-namespace
spec:
  image: set-namespace
  prefixes: [\"\", ghcr.io/kptdev/krm-functions-catalog]
  goExecutor:
    tags: [v0.4, v0.4.5]
  binaryExecutor:
    tags: [v0.4.2]
    path: set-namespace
  podExecutor:
    tags: [v0.4.1]
    maxParallelExecutions: 3
    templateOverrides:
      serviceAccountName: fn-runner
      securityContext:
        runAsNonRoot: true
      container:
        resources:
          limits:
            memory: 64Mi
        env:
        - name: LOG
          value: debug
";

    const SET_LABELS: &str = "\
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: set-labels
  namespace: porch-fn-system
spec:
  image: set-labels
  podExecutor:
    timeToLive: 1h30m
";

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, text).unwrap();
        path
    }

    fn names(loaded: &[Sourced]) -> Vec<&str> {
        loaded.iter().map(|s| s.name()).collect()
    }

    fn messages(errors: &[FunctionConfigLoadError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_porch_style_object_loads_with_every_field() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "set-namespace.yaml", SET_NAMESPACE);
        let (loaded, errors) = load_paths(std::slice::from_ref(&file));
        assert!(errors.is_empty(), "{:?}", messages(&errors));
        assert_eq!(loaded.len(), 1);
        assert_eq!(
            loaded[0].source(),
            &Source::File {
                path: file,
                document: 1
            }
        );
        let spec = &loaded[0].object().spec;
        assert_eq!(loaded[0].object().metadata.namespace, None);
        let pod = spec.pod_executor.as_ref().unwrap();
        // The CRD's default applies to files too, so a file means what the cluster would.
        assert_eq!(pod.time_to_live, "30m");
        assert_eq!(pod.max_parallel_executions, Some(3));
        let overrides = pod.template_overrides.as_ref().unwrap();
        assert_eq!(overrides.service_account_name.as_deref(), Some("fn-runner"));
        let container = overrides.container.as_ref().unwrap();
        assert_eq!(
            container.env.as_ref().unwrap()[0].value.as_deref(),
            Some("debug")
        );
        let limits = container
            .resources
            .as_ref()
            .unwrap()
            .limits
            .as_ref()
            .unwrap();
        assert_eq!(limits["memory"].0, "64Mi");
        assert_eq!(spec.go_executor.as_ref().unwrap().tags, ["v0.4", "v0.4.5"]);
        assert_eq!(spec.binary_executor.as_ref().unwrap().path, "set-namespace");
    }

    #[test]
    fn directories_give_their_yaml_files_in_name_order_with_every_document() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "b.yaml", SET_NAMESPACE);
        write(
            dir.path(),
            "a.yml",
            &format!(
                "---\n{SET_LABELS}---\n---\n{}",
                SET_NAMESPACE.replace("name: set-namespace", "name: second")
            ),
        );
        write(dir.path(), "notes.txt", "not: yaml: at all");
        write(dir.path(), ".hidden.yaml", "garbage: [");
        fs::create_dir(dir.path().join("sub")).unwrap();
        write(&dir.path().join("sub"), "deeper.yaml", "garbage: [");
        let (loaded, errors) = load_paths(&[dir.path().to_owned()]);
        assert!(errors.is_empty(), "{:?}", messages(&errors));
        assert_eq!(names(&loaded), ["set-labels", "second", "set-namespace"]);
        let documents: Vec<_> = loaded
            .iter()
            .map(|s| match s.source() {
                Source::File { path, document } => (
                    path.file_name().unwrap().to_str().unwrap().to_owned(),
                    *document,
                ),
                Source::Cluster => unreachable!(),
            })
            .collect();
        assert_eq!(
            documents,
            [
                ("a.yml".into(), 1),
                ("a.yml".into(), 3),
                ("b.yaml".into(), 1)
            ]
        );
        assert_eq!(
            loaded[0].object().metadata.namespace.as_deref(),
            Some("porch-fn-system")
        );
    }

    #[test]
    fn a_file_named_twice_is_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "set-labels.yaml", SET_LABELS);
        let (loaded, errors) = load_paths(&[file.clone(), dir.path().to_owned(), file]);
        assert!(errors.is_empty(), "{:?}", messages(&errors));
        assert_eq!(names(&loaded), ["set-labels"]);
    }

    #[test]
    fn other_kinds_are_errors_naming_file_and_document() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(
            dir.path(),
            "mixed.yaml",
            &format!(
                "{SET_LABELS}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n---\n\
                 apiVersion: config.porch.kpt.dev/v1beta1\nkind: FunctionConfig\n---\n- a\n---\n\
                 just text\n---\nmetadata: {{}}\n"
            ),
        );
        let (loaded, errors) = load_paths(std::slice::from_ref(&file));
        assert_eq!(names(&loaded), ["set-labels"]);
        let shown = file.display();
        assert_eq!(
            messages(&errors),
            [
                format!("{shown}, document 2: v1 ConfigMap is not a {API_VERSION} {KIND}"),
                format!(
                    "{shown}, document 3: config.porch.kpt.dev/v1beta1 FunctionConfig is not a \
                     {API_VERSION} {KIND}"
                ),
                format!("{shown}, document 4: a list is not a {API_VERSION} {KIND}"),
                format!("{shown}, document 5: a scalar is not a {API_VERSION} {KIND}"),
                format!(
                    "{shown}, document 6: an object without apiVersion and kind is not a \
                     {API_VERSION} {KIND}"
                ),
            ]
        );
    }

    #[test]
    fn unknown_fields_are_errors_listed_with_the_rule_violations() {
        let dir = tempfile::tempdir().unwrap();
        let typo = SET_NAMESPACE
            .replace("maxParallelExecutions", "maxParallelExecution")
            .replace("  - name: LOG", "  - nmae: x\n          name: LOG")
            .replace("metadata:\n", "metadata:\n  namspace: x\n")
            .replace("path: set-namespace", "path: \"\"");
        let file = write(dir.path(), "typo.yaml", &typo);
        let (loaded, errors) = load_paths(std::slice::from_ref(&file));
        assert!(loaded.is_empty());
        let [
            FunctionConfigLoadError::Invalid {
                errors: fields,
                document: 1,
                ..
            },
        ] = errors.as_slice()
        else {
            panic!("{:?}", messages(&errors));
        };
        let fields: Vec<_> = fields.iter().map(ToString::to_string).collect();
        assert_eq!(
            fields,
            [
                "metadata.namspace: unknown field",
                "spec.podExecutor.maxParallelExecution: unknown field",
                "spec.podExecutor.templateOverrides.container.env[0].nmae: unknown field",
                "spec.binaryExecutor.path: must not be empty",
            ]
        );
    }

    /// serde_json's `arbitrary_precision` is on in this crate's tests (see Cargo.toml): numbers
    /// that fit load, and those that do not are named with their value, not as "invalid number".
    #[test]
    fn numbers_load_and_misfits_are_named_with_their_value() {
        let dir = tempfile::tempdir().unwrap();
        let with_numbers = SET_NAMESPACE.replace(
            "        runAsNonRoot: true\n",
            "        runAsNonRoot: true\n        runAsUser: 65532\n        fsGroup: -2\n",
        );
        let file = write(dir.path(), "numbers.yaml", &with_numbers);
        let (loaded, errors) = load_paths(&[file]);
        assert!(errors.is_empty(), "{:?}", messages(&errors));
        let pod = loaded[0].object().spec.pod_executor.clone().unwrap();
        assert_eq!(pod.max_parallel_executions, Some(3));
        let security = pod.template_overrides.unwrap().security_context.unwrap();
        assert_eq!(
            (security.run_as_user, security.fs_group),
            (Some(65532), Some(-2))
        );

        for (written, expected) in [
            ("-1", "invalid value: integer `-1`, expected u32"),
            (
                "4294967296",
                "invalid value: integer `4294967296`, expected u32",
            ),
            ("2.5", "invalid type: floating point `2.5`, expected u32"),
        ] {
            let text = SET_NAMESPACE.replace(
                "maxParallelExecutions: 3",
                &format!("maxParallelExecutions: {written}"),
            );
            let file = write(dir.path(), "misfit.yaml", &text);
            let (loaded, errors) = load_paths(std::slice::from_ref(&file));
            assert!(loaded.is_empty());
            assert_eq!(
                messages(&errors),
                [format!(
                    "{}, document 1: spec.podExecutor.maxParallelExecutions: {expected}",
                    file.display()
                )]
            );
        }
    }

    #[test]
    fn wrong_types_and_missing_fields_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let wrong_type = write(
            dir.path(),
            "wrong-type.yaml",
            &SET_NAMESPACE.replace("maxParallelExecutions: 3", "maxParallelExecutions: -1"),
        );
        let missing = write(
            dir.path(),
            "missing.yaml",
            &SET_LABELS.replace("  image: set-labels\n", ""),
        );
        let (loaded, errors) = load_paths(&[wrong_type.clone(), missing.clone()]);
        assert!(loaded.is_empty());
        let errors = messages(&errors);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].starts_with(&format!(
                "{}, document 1: spec.podExecutor.maxParallelExecutions: invalid value: integer `-1`",
                wrong_type.display()
            )),
            "{}",
            errors[0]
        );
        assert_eq!(
            errors[1],
            format!(
                "{}, document 1: spec: missing field `image`",
                missing.display()
            )
        );
    }

    #[test]
    fn missing_paths_and_broken_yaml_are_errors_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let absent = dir.path().join("absent.yaml");
        let broken = write(
            dir.path(),
            "broken.yaml",
            &format!("{SET_LABELS}---\nspec: [unclosed\n---\n{SET_NAMESPACE}"),
        );
        let (loaded, errors) = load_paths(&[absent.clone(), broken.clone()]);
        assert_eq!(names(&loaded), ["set-labels"]);
        let errors = messages(&errors);
        assert_eq!(
            errors[0],
            format!("{}: no such file or directory", absent.display())
        );
        assert!(
            errors[1].starts_with(&format!(
                "{}, document 2: not valid YAML (rest of the file skipped): ",
                broken.display()
            )),
            "{}",
            errors[1]
        );
        assert_eq!(errors.len(), 2, "{errors:?}");
    }

    #[test]
    fn an_unreadable_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("binary.yaml");
        fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
        let (loaded, errors) = load_paths(std::slice::from_ref(&binary));
        assert!(loaded.is_empty());
        assert!(
            matches!(&errors[..], [FunctionConfigLoadError::File(error)] if error.path() == binary),
            "{:?}",
            messages(&errors)
        );
    }
}
