//! The toolchains (ConfigHub's `ToolchainType`): which native format a unit's config data is
//! in, and so how it becomes the YAML model the functions work on and how it is written back.

use krm_plugin_api::quoted;

/// A toolchain the executor serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Toolchain {
    /// Kubernetes resources in multi-document YAML: the model is the data itself.
    KubernetesYaml,
    /// A Java `.properties` file, seen as one YAML document whose nesting follows the dots of
    /// the keys ([`crate::properties`]).
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

    /// The names of every toolchain served, for messages.
    pub fn supported() -> String {
        Self::ALL.map(Toolchain::name).join(", ")
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
