//! Private registries (Porch's `--enable-private-registries`): the docker config file
//! ([`DockerConfig`]) whose credentials authenticate the image metadata fetch and, as a
//! `kubernetes.io/dockerconfigjson` Secret in the pod namespace, the nodes' image pulls.
//!
//! The file is read anew for every pod start, as Porch does: it is usually a mounted Secret,
//! which the kubelet refreshes when the credentials are rotated.

use std::path::PathBuf;

pub use krm_runner_function_config::docker_config::{DockerConfig, DockerConfigError};
use oci_client::secrets::RegistryAuth;

/// The docker config file and the pull Secret made from it.
#[derive(Debug, Clone)]
pub struct PrivateRegistries {
    pub file: PathBuf,
    pub secret_name: String,
}

impl PrivateRegistries {
    /// Reads and checks the file as it is now.
    pub fn read(&self) -> Result<DockerConfig, DockerConfigError> {
        DockerConfig::read(&self.file)
    }
}

/// `config`'s credentials for `registry`, anonymous when it has none.
pub fn auth_for(config: &DockerConfig, registry: &str) -> RegistryAuth {
    config
        .credentials_for(registry)
        .map_or(RegistryAuth::Anonymous, |(user, password)| {
            RegistryAuth::Basic(user.to_owned(), password.to_owned())
        })
}
