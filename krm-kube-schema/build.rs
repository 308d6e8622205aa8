//! Generates the Kubernetes schema of every resource type below from k8s-openapi and writes
//! it, deflated, to `OUT_DIR/kube-schema.json.z`: the shipped code carries a compact blob and
//! no generator.

use std::io::Write;

use k8s_openapi::Resource;
use schemars::{JsonSchema, SchemaGenerator, generate::SchemaSettings};
use serde_json::{Map, Value};

/// Collects the resource type (`group/version/Kind`, ConfigHub's spelling) and the name of
/// its definition.
fn add<T: Resource + JsonSchema>(
    generator: &mut SchemaGenerator,
    resources: &mut Map<String, Value>,
) {
    let resource_type = if T::GROUP.is_empty() {
        format!("{}/{}", T::VERSION, T::KIND)
    } else {
        format!("{}/{}/{}", T::GROUP, T::VERSION, T::KIND)
    };
    generator.subschema_for::<T>();
    resources.insert(resource_type, Value::String(T::schema_name().into_owned()));
}

fn kubernetes_version() -> &'static str {
    let mut selected = Vec::new();
    k8s_openapi::k8s_if_1_33! { selected.push("1.33"); }
    k8s_openapi::k8s_if_1_34! { selected.push("1.34"); }
    k8s_openapi::k8s_if_1_35! { selected.push("1.35"); }
    k8s_openapi::k8s_if_1_36! { selected.push("1.36"); }
    k8s_openapi::k8s_if_1_37! { selected.push("1.37"); }
    selected
        .pop()
        .expect("k8s-openapi selects a Kubernetes version this build script knows")
}

fn main() {
    use k8s_openapi::api::{
        admissionregistration::v1 as admission, apps::v1 as apps, autoscaling::v2 as autoscaling,
        batch::v1 as batch, coordination::v1 as coordination, core::v1 as core,
        discovery::v1 as discovery, networking::v1 as networking, policy::v1 as policy,
        rbac::v1 as rbac, scheduling::v1 as scheduling, storage::v1 as storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;

    // References as Swagger's `#/definitions/<name>`: the document is also what kpt's
    // starlark programs read as `ctx.open_api`.
    let mut generator = SchemaSettings::default()
        .with(|settings| settings.definitions_path = "/definitions".into())
        .into_generator();
    let mut resources = Map::new();
    macro_rules! resources {
        ($($t:ty),* $(,)?) => { $(add::<$t>(&mut generator, &mut resources);)* };
    }
    resources!(
        core::Binding,
        core::ConfigMap,
        core::Endpoints,
        core::Event,
        core::LimitRange,
        core::Namespace,
        core::Node,
        core::PersistentVolume,
        core::PersistentVolumeClaim,
        core::Pod,
        core::PodTemplate,
        core::ReplicationController,
        core::ResourceQuota,
        core::Secret,
        core::Service,
        core::ServiceAccount,
        apps::ControllerRevision,
        apps::DaemonSet,
        apps::Deployment,
        apps::ReplicaSet,
        apps::StatefulSet,
        batch::CronJob,
        batch::Job,
        autoscaling::HorizontalPodAutoscaler,
        networking::Ingress,
        networking::IngressClass,
        networking::NetworkPolicy,
        policy::PodDisruptionBudget,
        rbac::ClusterRole,
        rbac::ClusterRoleBinding,
        rbac::Role,
        rbac::RoleBinding,
        storage::CSIDriver,
        storage::StorageClass,
        storage::VolumeAttachment,
        scheduling::PriorityClass,
        coordination::Lease,
        discovery::EndpointSlice,
        admission::MutatingWebhookConfiguration,
        admission::ValidatingWebhookConfiguration,
        apiextensions::CustomResourceDefinition,
    );

    let mut document = Map::new();
    document.insert(
        "kubernetes".into(),
        Value::String(kubernetes_version().into()),
    );
    document.insert("resources".into(), Value::Object(resources));
    let definitions = generator
        .take_definitions(true)
        .into_iter()
        .collect::<Map<String, Value>>();
    document.insert("definitions".into(), Value::Object(definitions));

    let json = serde_json::to_vec(&Value::Object(document)).expect("a JSON value serializes");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let file = std::fs::File::create(out.join("kube-schema.json.z")).expect("OUT_DIR is writable");
    let mut encoder = flate2::write::ZlibEncoder::new(file, flate2::Compression::best());
    encoder.write_all(&json).expect("OUT_DIR is writable");
    encoder.finish().expect("OUT_DIR is writable");
    std::fs::write(out.join("kubernetes-version"), kubernetes_version())
        .expect("OUT_DIR is writable");
    println!("cargo::rerun-if-changed=build.rs");
}
