//! The HTTP side: routing of Kubernetes REST paths, discovery, CRUD, watch and patch.

use crate::error::ApiError;
use crate::resources::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{DeleteOptions, Deleted, EventKind, PatchType, Store, WatchEvent};
use crate::table;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// Source of container logs for `pods/log` (the node agent).
pub type LogFn = Arc<
    dyn Fn(
            String,
            String,
            Option<String>,
        ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>>
        + Send
        + Sync,
>;

/// Shared server state.
pub struct App {
    /// The object store.
    pub store: Arc<Store>,
    /// Where the server listens.
    pub addr: SocketAddr,
    /// `pods/log`, when a node agent runs.
    pub logs: Option<LogFn>,
    /// Requests received so far, of every kind (discovery and watches included).
    pub requests: Arc<AtomicU64>,
}

/// The axum router serving the API.
pub fn router(app: Arc<App>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(app)
}

fn json_response(code: u16, v: &Value) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(v).unwrap_or_default()))
        .expect("response")
}

fn error_response(e: &ApiError) -> Response {
    json_response(e.code, &e.status())
}

enum Target {
    Version,
    OpenApiRoot,
    OpenApi(String, String),
    Api,
    Apis,
    Group(String),
    Discovery(String, String),
    Res {
        def: Arc<ResourceDef>,
        version: String,
        ns: Option<String>,
        name: Option<String>,
        sub: Option<String>,
    },
}

fn route(store: &Store, path: &str) -> Result<Target, ApiError> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["version"] => return Ok(Target::Version),
        ["openapi", "v3"] => return Ok(Target::OpenApiRoot),
        ["openapi", "v3", "api", v] => return Ok(Target::OpenApi(String::new(), v.to_string())),
        ["openapi", "v3", "apis", g, v] => {
            return Ok(Target::OpenApi(g.to_string(), v.to_string()));
        }
        ["api"] => return Ok(Target::Api),
        ["apis"] => return Ok(Target::Apis),
        ["apis", g] => return Ok(Target::Group(g.to_string())),
        ["api", v, rest @ ..] => ("", v, rest),
        ["apis", g, v, rest @ ..] => (g, v, rest),
        _ => return Err(ApiError::no_route(path)),
    };
    let nf = || ApiError::no_route(path);
    if rest.is_empty() {
        let served = store
            .defs()
            .iter()
            .any(|d| d.group == group && d.versions.iter().any(|v| v == version));
        return if served {
            Ok(Target::Discovery(group.into(), version.into()))
        } else {
            Err(nf())
        };
    }
    let res = |plural: &str| store.resolve(group, version, plural).ok_or_else(nf);
    let s = |i: usize| rest.get(i).map(|x| x.to_string());
    if rest[0] == "namespaces" && rest.len() >= 3 {
        let is_ns_sub =
            group.is_empty() && rest.len() == 3 && matches!(rest[2], "status" | "finalize");
        if !is_ns_sub {
            if rest.len() > 5 {
                return Err(nf());
            }
            let def = res(rest[2])?;
            if !def.namespaced {
                return Err(nf());
            }
            return Ok(Target::Res {
                def,
                version: version.into(),
                ns: s(1),
                name: s(3),
                sub: s(4),
            });
        }
    }
    if rest.len() > 3 {
        return Err(nf());
    }
    let def = res(rest[0])?;
    if def.namespaced && rest.len() > 1 {
        return Err(nf());
    }
    Ok(Target::Res {
        def,
        version: version.into(),
        ns: None,
        name: s(1),
        sub: s(2),
    })
}

/// The single handler behind every path.
async fn handle(State(app): State<Arc<App>>, req: Request) -> Response {
    app.requests.fetch_add(1, Ordering::Relaxed);
    let method = req.method().clone();
    let uri = req.uri().clone();
    let headers = req.headers().clone();
    let body = match axum::body::to_bytes(req.into_body(), 64 << 20).await {
        Ok(b) => b,
        Err(e) => return error_response(&ApiError::bad_request(format!("reading body: {e}"))),
    };
    let query: HashMap<String, String> =
        serde_urlencoded::from_str::<Vec<(String, String)>>(uri.query().unwrap_or(""))
            .unwrap_or_default()
            .into_iter()
            .collect();
    tracing::debug!(%method, %uri, "request");
    match dispatch(&app, &method, uri.path(), &headers, &query, body).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(%method, %uri, error = %e, "request failed");
            error_response(&e)
        }
    }
}

fn parse_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if ct.contains("protobuf") || ct.contains("cbor") {
        return Err(ApiError::unsupported_media_type(format!(
            "the stand-in speaks JSON (and YAML) only, not {ct}"
        )));
    }
    match serde_json::from_slice(body) {
        Ok(v) => Ok(v),
        Err(je) => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if ct.contains("yaml") {
                yaml_serde::from_slice(body)
                    .map_err(|e| ApiError::bad_request(format!("invalid YAML body: {e}")))
            } else {
                Err(ApiError::bad_request(format!("invalid JSON body: {je}")))
            }
        }
    }
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

fn with_version(mut obj: Value, def: &ResourceDef, version: &str) -> Value {
    if obj.is_object() {
        obj["apiVersion"] = def.api_version(version).into();
    }
    obj
}

fn selectors(q: &HashMap<String, String>) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let l = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
    let f = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    Ok((l, f))
}

fn is_true(q: &HashMap<String, String>, k: &str) -> bool {
    q.get(k).is_some_and(|v| v == "true" || v == "1")
}

fn dry_run(q: &HashMap<String, String>, body: &Value) -> bool {
    q.get("dryRun").is_some_and(|v| v == "All")
        || body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|x| x == "All"))
}

async fn dispatch(
    app: &Arc<App>,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let store = &app.store;
    let target = route(store, path)?;
    let (def, version, ns, name, sub) = match target {
        Target::Version => return Ok(json_response(200, &version_info())),
        Target::OpenApiRoot => return Ok(json_response(200, &openapi_root(store))),
        Target::OpenApi(g, v) => return Ok(json_response(200, &openapi_doc(store, &g, &v))),
        Target::Api => {
            return Ok(json_response(
                200,
                &json!({
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": app.addr.to_string()}],
                }),
            ));
        }
        Target::Apis => return Ok(json_response(200, &group_list(store))),
        Target::Group(g) => {
            let list = group_list(store);
            let found = list["groups"]
                .as_array()
                .and_then(|gs| gs.iter().find(|x| x["name"] == g.as_str()).cloned());
            return match found {
                Some(mut x) => {
                    x["kind"] = "APIGroup".into();
                    x["apiVersion"] = "v1".into();
                    Ok(json_response(200, &x))
                }
                None => Err(ApiError::no_route(path)),
            };
        }
        Target::Discovery(g, v) => return Ok(json_response(200, &resource_list(store, &g, &v))),
        Target::Res {
            def,
            version,
            ns,
            name,
            sub,
        } => (def, version, ns, name, sub),
    };
    let nsr = ns.as_deref().unwrap_or("");
    if let Some(s) = sub.as_deref() {
        let ok = (s == "status" && def.status)
            || (s == "log" && def.plural == "pods" && def.group.is_empty());
        if !ok {
            return Err(ApiError::no_route(path));
        }
    }
    let status_sub = sub.as_deref() == Some("status");
    match (method.as_str(), name.as_deref()) {
        ("GET", None) => {
            let (labels, fields) = selectors(q)?;
            if is_true(q, "watch") {
                return watch(
                    app,
                    def,
                    version,
                    ns,
                    labels,
                    fields,
                    q,
                    wants_table(headers),
                )
                .await;
            }
            let limit = q.get("limit").and_then(|l| l.parse().ok());
            let page = store.list(
                &def,
                ns.as_deref(),
                &labels,
                &fields,
                limit,
                q.get("continue").map(String::as_str),
            )?;
            if wants_table(headers) {
                let include = q
                    .get("includeObject")
                    .map(String::as_str)
                    .unwrap_or("Metadata");
                let mut t = table::table(&def, &page.items, page.rv, include);
                if let Some(c) = &page.cont {
                    t["metadata"]["continue"] = c.clone().into();
                }
                return Ok(json_response(200, &t));
            }
            let mut meta = json!({"resourceVersion": page.rv.to_string()});
            if let Some(c) = page.cont {
                meta["continue"] = c.into();
                meta["remainingItemCount"] = page.remaining.into();
            }
            let items: Vec<Value> = page
                .items
                .into_iter()
                .map(|o| with_version(o, &def, &version))
                .collect();
            Ok(json_response(
                200,
                &json!({
                    "kind": def.list_kind,
                    "apiVersion": def.api_version(&version),
                    "metadata": meta,
                    "items": items,
                }),
            ))
        }
        ("GET", Some(n)) => {
            if sub.as_deref() == Some("log") {
                store.get(&def, nsr, n)?;
                let Some(logs) = &app.logs else {
                    return Err(ApiError::bad_request(
                        "no node agent runs in this stand-in: no logs",
                    ));
                };
                let text = logs(nsr.to_string(), n.to_string(), q.get("container").cloned())
                    .await
                    .map_err(ApiError::bad_request)?;
                return Ok(Response::builder()
                    .status(200)
                    .header(header::CONTENT_TYPE, "text/plain")
                    .body(Body::from(text))
                    .expect("response"));
            }
            let obj = store.get(&def, nsr, n)?;
            if wants_table(headers) {
                let include = q
                    .get("includeObject")
                    .map(String::as_str)
                    .unwrap_or("Metadata");
                let rv = store.current_rv();
                return Ok(json_response(200, &table::table(&def, &[obj], rv, include)));
            }
            Ok(json_response(200, &with_version(obj, &def, &version)))
        }
        ("POST", None) => {
            if def.namespaced && ns.is_none() {
                return Err(ApiError::method_not_allowed(
                    "create needs a namespace in the path",
                ));
            }
            let b = parse_body(headers, &body)?;
            let dr = dry_run(q, &Value::Null);
            let obj = store.create(&def, nsr, b, dr)?;
            Ok(json_response(201, &with_version(obj, &def, &version)))
        }
        ("PUT", Some(n)) => {
            let b = parse_body(headers, &body)?;
            let obj = store.update(&def, nsr, n, b, status_sub, dry_run(q, &Value::Null))?;
            Ok(json_response(200, &with_version(obj, &def, &version)))
        }
        ("PATCH", Some(n)) => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let kind = if ct.starts_with("application/merge-patch+json") {
                PatchType::Merge
            } else if ct.starts_with("application/strategic-merge-patch+json") {
                PatchType::Strategic
            } else if ct.starts_with("application/json-patch+json") {
                PatchType::Json
            } else if ct.starts_with("application/apply-patch+yaml") {
                PatchType::Apply
            } else {
                return Err(ApiError::unsupported_media_type(format!(
                    "the body of the request was in an unknown format ({ct:?}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json"
                )));
            };
            let b = parse_body(headers, &body)?;
            let obj = store.patch(&def, nsr, n, kind, &b, status_sub, dry_run(q, &Value::Null))?;
            Ok(json_response(200, &with_version(obj, &def, &version)))
        }
        ("DELETE", name) => {
            let b = parse_body(headers, &body).unwrap_or(Value::Null);
            let grace = q
                .get("gracePeriodSeconds")
                .and_then(|g| g.parse().ok())
                .or_else(|| b.get("gracePeriodSeconds").and_then(Value::as_i64));
            let opts = DeleteOptions {
                grace,
                uid: b
                    .pointer("/preconditions/uid")
                    .and_then(Value::as_str)
                    .map(String::from),
                resource_version: b
                    .pointer("/preconditions/resourceVersion")
                    .and_then(Value::as_str)
                    .map(String::from),
                dry_run: dry_run(q, &b),
            };
            match name {
                Some(n) => match store.delete(&def, nsr, n, &opts)? {
                    Deleted::Pending(obj) => {
                        Ok(json_response(200, &with_version(obj, &def, &version)))
                    }
                    Deleted::Removed(obj) => Ok(json_response(
                        200,
                        &json!({
                            "kind": "Status",
                            "apiVersion": "v1",
                            "metadata": {},
                            "status": "Success",
                            "details": {
                                "name": n,
                                "group": def.group,
                                "kind": def.plural,
                                "uid": obj.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
                            },
                        }),
                    )),
                },
                None => {
                    let (labels, fields) = selectors(q)?;
                    let items =
                        store.delete_collection(&def, ns.as_deref(), &labels, &fields, &opts)?;
                    let items: Vec<Value> = items
                        .into_iter()
                        .map(|o| with_version(o, &def, &version))
                        .collect();
                    Ok(json_response(
                        200,
                        &json!({
                            "kind": def.list_kind,
                            "apiVersion": def.api_version(&version),
                            "metadata": {"resourceVersion": store.current_rv().to_string()},
                            "items": items,
                        }),
                    ))
                }
            }
        }
        (m, _) => Err(ApiError::method_not_allowed(format!(
            "method {m} is not allowed on {path}"
        ))),
    }
}

fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0-krm-kube-standin",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "n/a (krm-kube-standin, a test-only stand-in)",
        "compiler": "rustc",
        "platform": "linux/amd64",
    })
}

fn group_versions(store: &Store) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for d in store.defs() {
        for v in &d.versions {
            let gv = (d.group.clone(), v.clone());
            if !out.contains(&gv) {
                out.push(gv);
            }
        }
    }
    out
}

/// OpenAPI v3 discovery root. Only enough for kubectl's check that the server does field
/// validation (it then skips client-side validation, which would need real schemas).
fn openapi_root(store: &Store) -> Value {
    let mut paths = serde_json::Map::new();
    for (g, v) in group_versions(store) {
        let key = if g.is_empty() {
            format!("api/{v}")
        } else {
            format!("apis/{g}/{v}")
        };
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", store.current_rv())}),
        );
    }
    json!({"paths": paths})
}

/// A skeletal OpenAPI v3 document for one group/version: a PATCH operation per type, tagged with
/// its group-version-kind and accepting `fieldValidation`. No schemas.
fn openapi_doc(store: &Store, group: &str, version: &str) -> Value {
    let mut paths = serde_json::Map::new();
    for d in store.defs() {
        if d.group != group || !d.versions.iter().any(|v| v == version) {
            continue;
        }
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let path = if d.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", d.plural)
        } else {
            format!("{prefix}/{}/{{name}}", d.plural)
        };
        let op = json!({
            "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": d.kind},
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            ],
            "responses": {"200": {"description": "OK"}},
        });
        paths.insert(path, json!({"patch": op, "put": op}));
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (krm-kube-standin, test-only)", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": {}},
    })
}

fn group_list(store: &Store) -> Value {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for d in store.defs() {
        if d.group.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|(g, _)| *g == d.group) {
            Some((_, vs)) => {
                for v in &d.versions {
                    if !vs.contains(v) {
                        vs.push(v.clone());
                    }
                }
            }
            None => groups.push((d.group.clone(), d.versions.clone())),
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .iter()
                .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                .collect();
            json!({
                "name": g,
                "versions": versions,
                "preferredVersion": versions[0],
            })
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn resource_list(store: &Store, group: &str, version: &str) -> Value {
    let resources: Vec<Value> = store
        .defs()
        .iter()
        .filter(|d| d.group == group && d.versions.iter().any(|v| v == version))
        .flat_map(|d| d.discovery())
        .collect();
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": if group.is_empty() { version.to_string() } else { format!("{group}/{version}") },
        "resources": resources,
    })
}

/// Maps a store event onto what a watcher with these filters sees (selector transitions become
/// ADDED / DELETED, as the API server's watch cache does).
fn translate(
    ev: &WatchEvent,
    def: &ResourceDef,
    ns: Option<&str>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> Option<(&'static str, Value)> {
    if ev.gr != def.gr() {
        return None;
    }
    if let Some(ns) = ns
        && def.namespaced
        && ev.ns != ns
    {
        return None;
    }
    let m = |o: &Value| labels.matches(o) && fields.matches(o);
    let now = m(&ev.object);
    let kind = match ev.kind {
        EventKind::Added => now.then_some("ADDED")?,
        EventKind::Deleted => now.then_some("DELETED")?,
        EventKind::Modified => match (ev.old.as_ref().map(m).unwrap_or(true), now) {
            (true, true) => "MODIFIED",
            (false, true) => "ADDED",
            (true, false) => "DELETED",
            (false, false) => return None,
        },
    };
    Some((kind, ev.object.clone()))
}

fn line(kind: &str, obj: &Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": kind, "object": obj})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

#[allow(clippy::too_many_arguments)]
async fn watch(
    app: &Arc<App>,
    def: Arc<ResourceDef>,
    version: String,
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    q: &HashMap<String, String>,
    as_table: bool,
) -> Result<Response, ApiError> {
    let include = q
        .get("includeObject")
        .cloned()
        .unwrap_or_else(|| "Metadata".into());
    // Each event's object: the object, or (for kubectl get -w) a one-row Table, as on a real
    // server.
    let render = {
        let def = def.clone();
        let version = version.clone();
        move |o: Value, rv: u64| -> Value {
            if as_table {
                table::table(&def, &[o], rv, &include)
            } else {
                with_version(o, &def, &version)
            }
        }
    };
    let rv: Option<u64> = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") => None,
        Some(s) => Some(
            s.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {s:?}")))?,
        ),
    };
    let send_initial = is_true(q, "sendInitialEvents");
    let bookmarks = is_true(q, "allowWatchBookmarks");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        .unwrap_or(1800);
    let (tx, rx_body) = mpsc::channel::<Result<Bytes, Infallible>>(256);
    let started = app.store.watch_start(&def.gr(), rv, send_initial);
    let bookmark = {
        let def = def.clone();
        let version = version.clone();
        move |rv: u64, initial_end: bool| {
            let mut meta = json!({"resourceVersion": rv.to_string()});
            if initial_end {
                meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            json!({"kind": def.kind, "apiVersion": def.api_version(&version), "metadata": meta})
        }
    };
    tokio::spawn(async move {
        let (initial, mut rx, start_rv) = match started {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(Ok(line("ERROR", &e.status()))).await;
                return;
            }
        };
        let mut last_rv = start_rv;
        for ev in &initial {
            if let Some((k, o)) = translate(ev, &def, ns.as_deref(), &labels, &fields)
                && tx.send(Ok(line(k, &render(o, ev.rv)))).await.is_err()
            {
                return;
            }
        }
        if send_initial
            && tx
                .send(Ok(line("BOOKMARK", &bookmark(start_rv, true))))
                .await
                .is_err()
        {
            return;
        }
        let deadline = tokio::time::sleep(Duration::from_secs(timeout));
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        tick.tick().await;
        loop {
            tokio::select! {
                r = rx.recv() => match r {
                    Ok(ev) => {
                        if ev.rv <= start_rv {
                            continue;
                        }
                        last_rv = ev.rv;
                        if let Some((k, o)) = translate(&ev, &def, ns.as_deref(), &labels, &fields)
                            && tx.send(Ok(line(k, &render(o, ev.rv)))).await.is_err()
                        {
                            return;
                        }
                    }
                    // A lagging watcher is closed; the client re-watches from its last
                    // resourceVersion and the history fills the gap.
                    Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = &mut deadline => return,
                _ = tick.tick(), if bookmarks => {
                    if tx.send(Ok(line("BOOKMARK", &bookmark(last_rv, false)))).await.is_err() {
                        return;
                    }
                }
                _ = tx.closed() => return,
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx_body);
    Ok(Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .expect("response"))
}
