//! The toolchains (ConfigHub's `ToolchainType`): which native format a unit's config data is
//! in, and so how it becomes the YAML model the functions work on and how it is written back.
//! This is the one place where native data and the model meet: the executor reads the unit
//! and writes it back through it, and so do the functions that take or give native data
//! (`compute-mutations`' previous data, `get-resources`' native bodies).

use krm_plugin_api::quoted;

use crate::path::{Segment, UnresolvedPath};
use crate::resource::{Element, Identify, OwnedUnit, Unit};
use crate::yaml::ParseError;
use kubernetes::CATEGORY_RESOURCE;
use properties::{CATEGORY_APP_CONFIG, CONFIG_NAME_PATH, PropertiesError, PropertiesFile};

pub mod kubernetes;
pub mod properties;

/// A toolchain the executor serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Toolchain {
    /// Kubernetes resources in multi-document YAML: the model is the data itself.
    KubernetesYaml,
    /// A Java `.properties` file, seen as one YAML document whose nesting follows the dots of
    /// the keys ([`properties`]).
    AppConfigProperties,
}

/// A toolchain name that names none of [`Toolchain::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("toolchain {} is not supported; supported: {}", quoted(.0), Toolchain::supported())]
pub struct UnknownToolchain(pub String);

impl Toolchain {
    /// Every toolchain served.
    pub const ALL: [Toolchain; 2] = [Toolchain::KubernetesYaml, Toolchain::AppConfigProperties];

    /// ConfigHub's name of the toolchain.
    pub fn name(self) -> &'static str {
        match self {
            Toolchain::KubernetesYaml => crate::api::KUBERNETES_YAML,
            Toolchain::AppConfigProperties => crate::api::APPCONFIG_PROPERTIES,
        }
    }

    /// The segment of functionsrv's routes for the toolchain (`/function/<route>`).
    pub fn route(self) -> &'static str {
        match self {
            Toolchain::KubernetesYaml => "kubernetes",
            Toolchain::AppConfigProperties => "properties",
        }
    }

    /// The toolchain ConfigHub calls `name`; an empty name is Kubernetes/YAML, as in
    /// requests written before toolchains were chosen.
    pub fn from_name(name: &str) -> Result<Self, UnknownToolchain> {
        if name.is_empty() {
            return Ok(Toolchain::KubernetesYaml);
        }
        Self::ALL
            .into_iter()
            .find(|toolchain| toolchain.name() == name)
            .ok_or_else(|| UnknownToolchain(name.to_owned()))
    }

    /// How the toolchain names the resource a document of its model holds.
    fn identify(self) -> Identify {
        match self {
            Toolchain::KubernetesYaml => kubernetes::element,
            Toolchain::AppConfigProperties => properties::element,
        }
    }

    /// `text` parsed as a unit of the toolchain's model, its resources identified as the
    /// toolchain does.
    pub fn parse(self, text: &str) -> Result<Unit<'_>, ParseError> {
        Unit::parse_with(text, self.identify())
    }

    /// [`Toolchain::parse`], the unit kept with its text.
    pub fn parse_owned(self, text: String) -> Result<OwnedUnit, ParseError> {
        OwnedUnit::parse_with(text, self.identify())
    }

    /// The names of every toolchain served, for messages.
    pub fn supported() -> String {
        Self::ALL.map(Toolchain::name).join(", ")
    }
}

/// Where `ensure-context` records the unit in each resource (ConfigHub's `ContextPath`): a
/// mapping and the keys of the unit's slug, the space's ID and the revision number.
#[derive(Debug, Clone, Copy)]
pub struct ContextKeys {
    pub mapping: &'static [&'static str],
    pub unit_slug: &'static str,
    pub space_id: &'static str,
    /// Only ever removed: ConfigHub does not write it (it would change every revision).
    pub revision_num: &'static str,
}

/// A unit's data in its toolchain's own format, kept so that the model the functions leave
/// can be written back over it.
#[derive(Debug)]
pub enum NativeData {
    /// The model is the data.
    Yaml,
    Properties(PropertiesFile),
}

impl Toolchain {
    /// The data type of an argument in the toolchain's own format.
    pub fn data_type(self) -> crate::api::DataType {
        match self {
            Toolchain::KubernetesYaml => crate::api::DataType::Yaml,
            Toolchain::AppConfigProperties => crate::api::DataType::Properties,
        }
    }

    /// The category of its resources (ConfigHub's `DefaultResourceCategory`).
    pub fn default_category(self) -> &'static str {
        match self {
            Toolchain::KubernetesYaml => CATEGORY_RESOURCE,
            Toolchain::AppConfigProperties => CATEGORY_APP_CONFIG,
        }
    }

    /// Whether a resource of type `a` may be the same resource as one of type `b` changed
    /// (ConfigHub's `ResourceTypesAreSimilar`): how mutation records match resources.
    pub fn types_similar(self, a: &str, b: &str) -> bool {
        match self {
            Toolchain::KubernetesYaml => kubernetes::types_similar(a, b),
            Toolchain::AppConfigProperties => a == b,
        }
    }

    /// Where a resource's name without scope is (what `replicate` makes unique).
    pub fn name_path(self) -> &'static [&'static str] {
        match self {
            Toolchain::KubernetesYaml => &["metadata", "name"],
            Toolchain::AppConfigProperties => &CONFIG_NAME_PATH,
        }
    }

    pub fn context_keys(self) -> ContextKeys {
        match self {
            Toolchain::KubernetesYaml => ContextKeys {
                mapping: &["metadata", "annotations"],
                unit_slug: "confighub.com/UnitSlug",
                space_id: "confighub.com/SpaceID",
                revision_num: "confighub.com/RevisionNum",
            },
            Toolchain::AppConfigProperties => ContextKeys {
                mapping: &["configHub"],
                unit_slug: "unitSlug",
                space_id: "spaceID",
                revision_num: "revisionNum",
            },
        }
    }

    /// Refuses a path whose creation would leave data the toolchain's reader refuses:
    /// nesting deeper than the YAML parser takes, or (AppConfig/Properties) a property key
    /// that reading the file refuses. The path's segments other than keys stand for one
    /// existing key each.
    pub(crate) fn check_new_path(self, path: &UnresolvedPath) -> Result<(), String> {
        match self {
            Toolchain::KubernetesYaml => {
                if path.segments.len() > crate::yaml::MAX_DEPTH {
                    return Err(format!(
                        "path {}: {} segments would nest deeper than the {} levels YAML is read to",
                        quoted(&path.text),
                        path.segments.len(),
                        crate::yaml::MAX_DEPTH
                    ));
                }
                Ok(())
            }
            Toolchain::AppConfigProperties => {
                let key: Vec<&str> = path
                    .segments
                    .iter()
                    .map(|segment| match segment {
                        Segment::Key { key, .. } => key.as_str(),
                        _ => "*",
                    })
                    .collect();
                match properties::key_problem(&key.join(".")) {
                    Some(problem) => Err(format!(
                        "path {}: its property key {problem}",
                        quoted(&path.text)
                    )),
                    None => Ok(()),
                }
            }
        }
    }

    /// Reads native `text`: the model the functions work on, and what writes it back.
    pub fn read(self, text: String) -> Result<(String, NativeData), PropertiesError> {
        match self {
            Toolchain::KubernetesYaml => Ok((text, NativeData::Yaml)),
            Toolchain::AppConfigProperties => {
                let file = PropertiesFile::parse(text)?;
                Ok((file.model()?, NativeData::Properties(file)))
            }
        }
    }

    /// The model of native `text` (an argument in the toolchain's own format).
    pub fn model_of(self, text: &str) -> Result<String, PropertiesError> {
        self.read(text.to_owned()).map(|(model, _)| model)
    }

    /// One resource of `unit` in the toolchain's own format, on its own.
    pub fn native_text(self, unit: &Unit, element: &Element) -> Result<String, PropertiesError> {
        match self {
            Toolchain::KubernetesYaml => Ok(unit.element_text(element).to_owned()),
            Toolchain::AppConfigProperties => PropertiesFile::parse(String::new())?.write(
                &unit.doc.to_json(element.root),
                &properties::comments(&unit.doc, element.root),
            ),
        }
    }
}

impl NativeData {
    /// Whether the toolchain's format can hold `unit`: a properties file holds one mapping.
    /// None is not held either: an empty file reads as one resource (NoName), and ConfigHub's
    /// propkit cannot write an empty unit (its YAMLToNative fails on it).
    pub fn check(&self, unit: &Unit) -> Result<(), PropertiesError> {
        match self {
            NativeData::Yaml => Ok(()),
            NativeData::Properties(_) => match unit.elements.as_slice() {
                [] => Err(PropertiesError::NotAMapping(
                    "no resource; a properties file holds one".into(),
                )),
                [element] if unit.doc.is_map(element.root) => {
                    properties::check_keys(&unit.doc.to_json(element.root))
                }
                [_] => Err(PropertiesError::NotAMapping(
                    "the document is not a mapping".into(),
                )),
                more => Err(PropertiesError::NotAMapping(format!(
                    "{} documents; a properties file holds one resource",
                    more.len()
                ))),
            },
        }
    }

    /// The data after the functions left the model as `unit`.
    pub fn write(&self, unit: &Unit) -> Result<String, PropertiesError> {
        let NativeData::Properties(file) = self else {
            return Ok(unit.doc.src.to_owned());
        };
        self.check(unit)?;
        let [element] = unit.elements.as_slice() else {
            unreachable!("check holds a properties unit to one resource");
        };
        file.write(
            &unit.doc.to_json(element.root),
            &properties::comments(&unit.doc, element.root),
        )
    }
}

impl std::fmt::Display for Toolchain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_list_the_supported() {
        for toolchain in Toolchain::ALL {
            assert_eq!(Toolchain::from_name(toolchain.name()), Ok(toolchain));
        }
        assert_eq!(Toolchain::from_name(""), Ok(Toolchain::KubernetesYaml));
        let error = Toolchain::from_name("OpenTofu/HCL")
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "toolchain \"OpenTofu/HCL\" is not supported; supported: Kubernetes/YAML, AppConfig/Properties"
        );
    }
}
