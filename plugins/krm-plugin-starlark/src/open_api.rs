//! `ctx.open_api`: the Kubernetes schema as kpt gives it to starlark programs, a Swagger 2.0
//! document whose `definitions` are indexed by name
//! (`ctx.open_api["definitions"]["io.k8s.api.apps.v1.Deployment"]["description"]`). It is a
//! read-only view of krm-kube-schema's document: nothing is copied onto the program's heap
//! but the scalars it reads, and the schema is inflated the first time a program indexes it,
//! so programs that never do pay nothing.

use std::fmt;

use allocative::Allocative;
use starlark::starlark_simple_value;
use starlark::values::{
    Heap, NoSerialize, ProvidesStaticType, StarlarkPagablePanic, StarlarkValue, Value,
};
use starlark_derive::starlark_value;

/// A map or list of the schema; `None` is the whole document, not yet read.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative, StarlarkPagablePanic)]
pub struct OpenApi {
    #[allocative(skip)]
    node: Option<&'static serde_json::Value>,
}

starlark_simple_value!(OpenApi);

/// The value of `ctx.open_api`.
pub fn document<'v>(heap: Heap<'v>) -> Value<'v> {
    heap.alloc(OpenApi { node: None })
}

fn error(message: String) -> starlark::Error {
    starlark::Error::new_other(anyhow::anyhow!("ctx.open_api: {message}"))
}

impl OpenApi {
    fn node(&self) -> starlark::Result<&'static serde_json::Value> {
        match self.node {
            Some(node) => Ok(node),
            None => krm_kube_schema::schema()
                .map(krm_kube_schema::Schema::openapi)
                .map_err(|e| error(e.to_string())),
        }
    }

    /// A map or list as another view, a scalar as a starlark value.
    fn child<'v>(node: &'static serde_json::Value, heap: Heap<'v>) -> Value<'v> {
        if node.is_object() || node.is_array() {
            heap.alloc(OpenApi { node: Some(node) })
        } else {
            heap.alloc(node.clone())
        }
    }
}

impl fmt::Display for OpenApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.node {
            Some(node) => write!(f, "{node}"),
            None => write!(
                f,
                "<open_api: Kubernetes {}>",
                krm_kube_schema::KUBERNETES_VERSION
            ),
        }
    }
}

#[starlark_value(type = "open_api")]
impl<'v> StarlarkValue<'v> for OpenApi {
    fn at(&self, index: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        let node = self.node()?;
        let found = match node {
            serde_json::Value::Object(map) => {
                let key = index
                    .unpack_str()
                    .ok_or_else(|| error(format!("a map is indexed by a string, not {index}")))?;
                map.get(key)
                    .ok_or_else(|| error(format!("key {key:?} not found")))?
            }
            serde_json::Value::Array(list) => {
                let position = index
                    .unpack_i32()
                    .and_then(|i| usize::try_from(i).ok())
                    .ok_or_else(|| error(format!("a list is indexed by a number, not {index}")))?;
                list.get(position).ok_or_else(|| {
                    error(format!(
                        "index {position} out of range (length {})",
                        list.len()
                    ))
                })?
            }
            _ => return Err(error("only maps and lists are indexed".into())),
        };
        Ok(Self::child(found, heap))
    }

    fn length(&self) -> starlark::Result<i32> {
        let len = match self.node()? {
            serde_json::Value::Object(map) => map.len(),
            serde_json::Value::Array(list) => list.len(),
            _ => 0,
        };
        Ok(i32::try_from(len).unwrap_or(i32::MAX))
    }

    fn is_in(&self, other: Value<'v>) -> starlark::Result<bool> {
        Ok(match (self.node()?, other.unpack_str()) {
            (serde_json::Value::Object(map), Some(key)) => map.contains_key(key),
            (serde_json::Value::Array(list), Some(text)) => {
                list.iter().any(|item| item.as_str() == Some(text))
            }
            _ => false,
        })
    }

    fn iterate_collect(&self, heap: Heap<'v>) -> starlark::Result<Vec<Value<'v>>> {
        Ok(match self.node()? {
            serde_json::Value::Object(map) => map.keys().map(|k| heap.alloc(k.as_str())).collect(),
            serde_json::Value::Array(list) => list.iter().map(|n| Self::child(n, heap)).collect(),
            _ => Vec::new(),
        })
    }
}
