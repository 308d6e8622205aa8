//! Kubernetes `Status` failures, shaped so that kube-rs and kubectl map them as they would a
//! real API server's (`reason` and `code` are what clients branch on).

use crate::resources::ResourceDef;
use serde_json::{Value, json};

/// An API failure.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, ...).
    pub reason: &'static str,
    /// Human-readable message, in the API server's wording where it matters.
    pub message: String,
    /// `details` (`name`, `group`, `kind`).
    pub details: Value,
}

fn details(def: &ResourceDef, name: &str) -> Value {
    json!({"name": name, "group": def.group, "kind": def.plural})
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: Value::Null,
        }
    }

    /// 404 `pods "x" not found`.
    pub fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self {
            details: details(def, name),
            ..Self::new(
                404,
                "NotFound",
                format!("{} \"{name}\" not found", def.qualified()),
            )
        }
    }

    /// 404 for a namespace that does not exist.
    pub fn namespace_not_found(ns: &str) -> Self {
        Self {
            details: json!({"name": ns, "kind": "namespaces"}),
            ..Self::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
        }
    }

    /// 404 for a path that names nothing.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 409 `pods "x" already exists`.
    pub fn already_exists(def: &ResourceDef, name: &str) -> Self {
        Self {
            details: details(def, name),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", def.qualified()),
            )
        }
    }

    /// 409 stale `resourceVersion` (or a failed precondition).
    pub fn conflict(def: &ResourceDef, name: &str, why: &str) -> Self {
        Self {
            details: details(def, name),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": {why}",
                    def.qualified()
                ),
            )
        }
    }

    /// The standard stale-update conflict.
    pub fn stale(def: &ResourceDef, name: &str) -> Self {
        Self::conflict(
            def,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 `Pod "x" is invalid: ...`.
    pub fn invalid(def: &ResourceDef, name: &str, what: impl AsRef<str>) -> Self {
        Self {
            details: details(def, name),
            ..Self::new(
                422,
                "Invalid",
                format!("{} \"{name}\" is invalid: {}", def.kind, what.as_ref()),
            )
        }
    }

    /// 400.
    pub fn bad_request(msg: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", msg)
    }

    /// 403.
    pub fn forbidden(msg: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", msg)
    }

    /// 405.
    pub fn method_not_allowed(msg: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", msg)
    }

    /// 410 (watch from a resourceVersion that is no longer in the history).
    pub fn gone(msg: impl Into<String>) -> Self {
        Self::new(410, "Expired", msg)
    }

    /// 415.
    pub fn unsupported_media_type(msg: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", msg)
    }

    /// 500.
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(500, "InternalError", msg)
    }

    /// The `Status` object sent on the wire.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if !self.details.is_null() {
            s["details"] = self.details.clone();
        }
        s
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}
