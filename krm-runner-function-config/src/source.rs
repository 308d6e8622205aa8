//! Where a FunctionConfig came from, so that every message can point at it.

use std::fmt;
use std::path::PathBuf;

use crate::types::FunctionConfig;
use crate::validate::{FieldError, validate};

/// Where an object was read.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// A YAML file; `document` counts from 1 in a multi-document file.
    File { path: PathBuf, document: usize },
    /// The Kubernetes API.
    Cluster,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File { path, document } => {
                write!(f, "{}, document {document}", path.display())
            }
            Source::Cluster => f.write_str("cluster"),
        }
    }
}

/// Names one object in messages: `FunctionConfig ns/name (source)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectId {
    pub namespace: Option<String>,
    pub name: String,
    pub source: Source,
}

impl ObjectId {
    fn of(config: &FunctionConfig, source: &Source) -> Self {
        Self {
            namespace: config.metadata.namespace.clone(),
            name: config.metadata.name.clone().unwrap_or_default(),
            source: source.clone(),
        }
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FunctionConfig ")?;
        if let Some(namespace) = &self.namespace {
            write!(f, "{namespace}/")?;
        }
        write!(f, "{} ({})", self.name, self.source)
    }
}

/// A valid FunctionConfig and where it came from. Only valid objects are ever `Sourced`, so the
/// routing table can trust them.
#[derive(Clone, Debug, PartialEq)]
pub struct Sourced {
    object: FunctionConfig,
    source: Source,
}

/// A cluster object that fails [`validate`].
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{object} is invalid: {}", join(errors))]
pub struct InvalidObject {
    pub object: ObjectId,
    pub errors: Vec<FieldError>,
}

pub(crate) fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl Sourced {
    /// Accepts an object read from the Kubernetes API, if it is valid.
    pub fn from_cluster(object: FunctionConfig) -> Result<Self, InvalidObject> {
        Self::checked(object, Source::Cluster)
    }

    pub(crate) fn checked(object: FunctionConfig, source: Source) -> Result<Self, InvalidObject> {
        match validate(&object) {
            errors if errors.is_empty() => Ok(Self { object, source }),
            errors => Err(InvalidObject {
                object: ObjectId::of(&object, &source),
                errors,
            }),
        }
    }

    pub fn object(&self) -> &FunctionConfig {
        &self.object
    }

    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The object's identity for messages.
    pub fn id(&self) -> ObjectId {
        ObjectId::of(&self.object, &self.source)
    }

    /// `metadata.name`, which validation guarantees.
    pub(crate) fn name(&self) -> &str {
        self.object.metadata.name.as_deref().unwrap_or_default()
    }
}
