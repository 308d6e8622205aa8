//! `krm-runner eval`: one call through the served chain, in this process, like `kpt fn eval`;
//! and how a command builds a ResourceList from the input it is given.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, bail};
use krm_plugin_api::CancelReason;
use krm_plugin_loader::HostCallContext;
use krm_runner_function_config::config_file;
use krm_yaml_edit::{Doc, Editor, NodeId, TopLevel};

use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient;

use super::{BadInvocation, Exit, Workers, adopt_orphans, configure, run_async};
use crate::allocator;
use crate::cli::{EvalArgs, Flags};
use crate::config::Config;
use crate::runtime::{Purpose, Runtime};
use crate::telemetry::traces::CallTrace;

pub fn run(flags: &Flags, args: &EvalArgs) -> Exit {
    let configured = configure(flags)?;
    if let Some(address) = &args.server {
        let max_message_bytes = configured.without_problems()?.max_message_bytes;
        // The serving runner's plugins answer; none are loaded here.
        return Ok(run_async(
            Workers::One,
            run_remote(address, args, max_message_bytes),
        ));
    }
    let runtime = configured.start_runtime(Purpose::Serve, start_for_one_call)?;
    adopt_orphans(krm_plugin_api::process::adopt_orphans_for_one_call);
    let code = run_async(Workers::One, async {
        allocator::keep_freed_heap();
        evaluate(&runtime, args, configured.config.max_message_bytes).await
    });
    krm_plugin_api::process::kill_orphans_now();
    Ok(code)
}

/// `eval` makes one call: only the instances it reaches start.
fn start_for_one_call(config: &Config, purpose: Purpose) -> Result<Runtime, Vec<String>> {
    match purpose {
        Purpose::Serve => Runtime::for_one_call(config),
        purpose => Runtime::start(config, purpose),
    }
}

/// Runs the call; returns the process exit code (0 success, 1 function failure). Inputs over
/// `max_bytes` (the runner's `max_message_bytes`) are refused, as the server refuses them.
async fn evaluate(runtime: &Runtime, args: &EvalArgs, max_bytes: usize) -> anyhow::Result<i32> {
    let resource_list = prepare(args, max_bytes)?;
    let context = HostCallContext::new(None);
    let cancel = context.clone();
    let interrupted = tokio::spawn(async move {
        crate::signals::terminated().await;
        cancel.cancel(CancelReason::CallerCancelled);
    });
    let admitted = match runtime.admit(&context, &args.image).await {
        Ok(admitted) => admitted,
        Err(refused) => {
            interrupted.abort();
            eprintln!("krm-runner eval: {refused}");
            return Ok(1);
        }
    };
    let outcome = runtime
        .evaluate(
            context,
            &CallTrace::default(),
            admitted,
            resource_list.into_bytes(),
        )
        .await
        .0;
    interrupted.abort();
    write_outcome(outcome, "krm-runner eval")
}

/// `krm-runner eval --server ADDR`: the same call, sent to a running runner over gRPC. Returns
/// the exit code as [`evaluate`] does; the evaluator that served (the `x-krm-evaluator` header)
/// and what the result cache did (`x-krm-cache`) are
/// printed to stderr.
async fn run_remote(
    address: &str,
    args: &EvalArgs,
    max_message_bytes: usize,
) -> anyhow::Result<i32> {
    let resource_list = prepare(args, max_message_bytes)?;
    let endpoint = if address.contains("://") {
        address.to_owned()
    } else {
        format!("http://{address}")
    };
    let channel = tonic::transport::Endpoint::from_shared(endpoint.clone())
        .map_err(|error| BadInvocation::error(format!("--server {address:?}: {error}")))?
        .connect()
        .await
        .with_context(|| format!("cannot reach a runner at {endpoint}"))?;
    let mut client = FunctionEvaluatorClient::new(channel)
        .max_decoding_message_size(max_message_bytes)
        .max_encoding_message_size(max_message_bytes);
    let call = client.evaluate_function(EvaluateFunctionRequest {
        resource_list: resource_list.into_bytes(),
        image: args.image.clone(),
        tag: String::new(),
    });
    let outcome = tokio::select! {
        outcome = call => outcome,
        () = crate::signals::terminated() => bail!("interrupted"),
    };
    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr().lock();
    match outcome {
        Ok(response) => {
            let evaluator = response
                .metadata()
                .get(crate::server::EVALUATOR_HEADER)
                .and_then(|value| value.to_str().ok())
                .unwrap_or("(not named)")
                .to_owned();
            let cache = response
                .metadata()
                .get(crate::cache::CACHE_HEADER)
                .and_then(|value| value.to_str().ok())
                .map(|cache| format!(" (cache: {cache})"))
                .unwrap_or_default();
            let response = response.into_inner();
            stderr.write_all(&response.log)?;
            writeln!(
                stderr,
                "krm-runner eval: served by {evaluator} at {endpoint}{cache}"
            )?;
            stdout.write_all(&response.resource_list)?;
            Ok(0)
        }
        Err(status) => {
            writeln!(
                stderr,
                "krm-runner eval: {endpoint} answered {:?}: {}",
                status.code(),
                status.message()
            )?;
            Ok(1)
        }
    }
}

/// Writes a call's output as a KRM function does; returns the exit status.
pub(super) fn write_outcome(
    outcome: Result<krm_plugin_api::EvalResponse, krm_plugin_api::EvalError>,
    command: &str,
) -> anyhow::Result<i32> {
    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr().lock();
    match outcome {
        Ok(response) => {
            stderr.write_all(&response.log)?;
            stdout.write_all(&response.resource_list)?;
            if let Some(evaluator) = &response.served_by {
                tracing::debug!(evaluator, declined = ?response.declined, "served");
            }
            Ok(0)
        }
        Err(error) => {
            stderr.write_all(&error.log)?;
            stdout.write_all(&error.resource_list)?;
            writeln!(stderr, "{command}: {}", error.message)?;
            Ok(1)
        }
    }
}

/// The call's ResourceList, from the input and the functionConfig arguments (each at most
/// `max_bytes`); any problem with them is a [`BadInvocation`].
fn prepare(args: &EvalArgs, max_bytes: usize) -> anyhow::Result<String> {
    let build = || {
        let input = read_text(args.input.as_deref(), max_bytes)?;
        let function_config = function_config(args)?;
        resource_list(input, function_config.as_deref())
    };
    build().map_err(|error| BadInvocation::error(format!("{error:#}")))
}

/// Reads at most `max_bytes` from `source`, naming it when there is more.
pub(super) fn read_bounded(
    source: impl Read,
    name: &str,
    max_bytes: usize,
) -> anyhow::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    source
        .take(max_bytes as u64 + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {name}"))?;
    if bytes.len() > max_bytes {
        bail!("{name} is over {max_bytes} bytes (max_message_bytes)");
    }
    Ok(bytes)
}

fn read_text(path: Option<&Path>, max_bytes: usize) -> anyhow::Result<String> {
    let bytes = match path {
        None => read_bounded(std::io::stdin(), "stdin", max_bytes)?,
        Some(path) if path == Path::new("-") => read_bounded(std::io::stdin(), "stdin", max_bytes)?,
        Some(path) => {
            let name = path.display().to_string();
            let file = std::fs::File::open(path).with_context(|| format!("reading {name}"))?;
            read_bounded(file, &name, max_bytes)?
        }
    };
    String::from_utf8(bytes).context("the input is not UTF-8 text")
}

fn function_config(args: &EvalArgs) -> anyhow::Result<Option<String>> {
    match (&args.fn_config, args.data.is_empty()) {
        (Some(_), false) => bail!("give either --fn-config or key=value pairs, not both"),
        (Some(path), true) => {
            let text = config_file::read_text(path).context("--fn-config")?;
            match config_file::from_yaml::<yaml_serde::Value>(&text) {
                Ok(yaml_serde::Value::Mapping(_)) => Ok(Some(text)),
                Ok(_) => bail!("--fn-config {}: not a YAML mapping", path.display()),
                Err(error) => bail!("--fn-config {}: not valid YAML: {error}", path.display()),
            }
        }
        (None, false) => config_map(&args.data).map(Some),
        (None, true) => Ok(None),
    }
}

/// The ConfigMap functionConfig kpt builds from `key=value` pairs.
pub(super) fn config_map(pairs: &[String]) -> anyhow::Result<String> {
    let mut data = yaml_serde::Mapping::new();
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("{pair:?} is not key=value");
        };
        data.insert(key.into(), value.into());
    }
    let config = yaml_serde::to_string(&yaml_serde::Value::Mapping(
        [
            ("apiVersion".into(), "v1".into()),
            ("kind".into(), "ConfigMap".into()),
            (
                "metadata".into(),
                yaml_serde::Value::Mapping(
                    [("name".into(), "function-input".into())]
                        .into_iter()
                        .collect(),
                ),
            ),
            ("data".into(), yaml_serde::Value::Mapping(data)),
        ]
        .into_iter()
        .collect(),
    ))?;
    Ok(config)
}

/// Builds the ResourceList text. The input's own text is kept (indented into place) rather
/// than re-serialised, so its comments and formatting reach the function.
pub fn resource_list(input: String, function_config: Option<&str>) -> anyhow::Result<String> {
    // A lone ResourceList goes on as it came, its functionConfig (if one is given) put in place.
    let lone_list_edit = lone_resource_list(&input).map(|list| match function_config {
        Some(config) => list.mapping_edit("functionConfig", config),
        None => Some((0..0, String::new())),
    });
    if let Some(Some((range, text))) = lone_list_edit {
        let mut list = input;
        list.replace_range(range, &text);
        return Ok(list);
    }
    let documents = split_documents(&input);
    let mut lists = Vec::new();
    for (index, document) in documents.iter().enumerate() {
        let doc = Doc::parse(document).map_err(|error| {
            anyhow::anyhow!("input document {}: not valid YAML: {error}", index + 1)
        })?;
        let root = doc.roots.first().copied().filter(|&root| doc.is_map(root));
        let Some(root) = root else {
            bail!("input document {}: not a YAML mapping", index + 1);
        };
        for key in ["apiVersion", "kind"] {
            if doc.get_str(root, &[key]).is_none() {
                bail!(
                    "input document {}: not a KRM resource (no {key})",
                    index + 1
                );
            }
        }
        if doc.get_str(root, &["kind"]) == Some("ResourceList") {
            lists.push((index, doc, root));
        }
    }
    match lists.as_slice() {
        [] => {}
        [(_, list, root)] if documents.len() == 1 => {
            return match function_config {
                None => Ok(documents[0].clone()),
                Some(config) => with_function_config(list, *root, config),
            };
        }
        [(index, ..), ..] => bail!(
            "input document {}: a ResourceList must be the only document",
            index + 1
        ),
    }
    let mut text = String::from("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:");
    if documents.is_empty() {
        text.push_str(" []");
    }
    text.push('\n');
    for document in &documents {
        push_indented(&mut text, document, "- ");
    }
    if let Some(config) = function_config {
        text.push_str("functionConfig:\n");
        push_indented(&mut text, config, "  ");
    }
    Ok(text)
}

/// The input's top level, when it is plainly one ResourceList (see [`TopLevel`]): the function
/// parses the list, so it is passed on without a parse here (a large list's parse would be most
/// of the call's work), and only its top level is edited.
fn lone_resource_list(input: &str) -> Option<TopLevel<'_>> {
    let list = TopLevel::scan(input)?;
    let is_list = list.plain_scalar("kind") == Some("ResourceList") && list.has("apiVersion");
    is_list.then_some(list)
}

/// `list` with `config` as its functionConfig, in place of any it has; every other byte of the
/// list is kept.
fn with_function_config(list: &Doc, root: NodeId, config: &str) -> anyhow::Result<String> {
    let config = Doc::parse(config).map_err(|error| anyhow::anyhow!("functionConfig: {error}"))?;
    let [config_root] = config.roots.as_slice() else {
        bail!("functionConfig: not one YAML document");
    };
    let value = config.to_new(*config_root);
    let mut editor = Editor::default();
    match list.get(root, "functionConfig") {
        Some(existing) => editor.replace_node(list, existing, &value),
        None => editor.insert(list, root, "functionConfig", value),
    }
    Ok(editor.finish(list))
}

fn push_indented(out: &mut String, document: &str, first_prefix: &str) {
    let mut first = true;
    for line in document.lines() {
        if first && (line.trim().is_empty() || line.trim_start().starts_with('#')) {
            // Leading comments stay above the item, at item indentation.
            out.push_str("  ");
            out.push_str(line);
            out.push('\n');
            continue;
        }
        if first {
            out.push_str(first_prefix);
            first = false;
        } else if !line.is_empty() {
            out.push_str("  ");
        }
        out.push_str(line);
        out.push('\n');
    }
}

/// Splits a YAML stream at document markers, dropping empty documents.
fn split_documents(input: &str) -> Vec<String> {
    let mut documents = Vec::new();
    let mut current = String::new();
    for line in input.lines() {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed.starts_with("--- ") || trimmed == "..." {
            documents.push(std::mem::take(&mut current));
            if let Some(rest) = trimmed.strip_prefix("--- ") {
                current.push_str(rest);
                current.push('\n');
            }
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    documents.push(current);
    documents
        .into_iter()
        .filter(|doc| {
            doc.lines()
                .any(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::resource_list;

    #[test]
    fn wraps_documents_keeping_comments() {
        let input = "# top\napiVersion: v1\nkind: ConfigMap # inline\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: b}\n";
        let list = resource_list(input.to_owned(), None).unwrap();
        assert!(list.contains("# inline"), "{list}");
        let parsed: yaml_serde::Value = yaml_serde::from_str(&list).unwrap();
        assert_eq!(parsed["items"][0]["metadata"]["name"], "a");
        assert_eq!(parsed["items"][1]["kind"], "Secret");
    }

    #[test]
    fn a_resource_list_gets_the_function_config_in_place_keeping_every_other_byte() {
        let config = "apiVersion: v1\nkind: ConfigMap\ndata:\n  namespace: prod\n";
        let list = "# the package\napiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1 # inline\n  kind: ConfigMap\n  metadata: {name: a}\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  data: {namespace: old}\nresults: []\n";
        let replaced = resource_list(list.to_owned(), Some(config)).unwrap();
        assert_eq!(
            replaced,
            list.replace("data: {namespace: old}", "data:\n    namespace: prod"),
        );
        let without = list.split("functionConfig:").next().unwrap();
        let inserted = resource_list(without.to_owned(), Some(config)).unwrap();
        assert!(inserted.starts_with(without), "{inserted}");
        let parsed: yaml_serde::Value = yaml_serde::from_str(&inserted).unwrap();
        assert_eq!(parsed["functionConfig"]["data"]["namespace"], "prod");
        let commented = list.replace("results: []", "# the end\nresults: []");
        let replaced = resource_list(commented.clone(), Some(config)).unwrap();
        assert_eq!(
            replaced,
            commented.replace("data: {namespace: old}", "data:\n    namespace: prod"),
        );
        assert_eq!(resource_list(list.to_owned(), None).unwrap(), list);
        // Read by a parse rather than line by line: the same list results.
        let quoted = list.replace("kind: ResourceList", "kind: \"ResourceList\"");
        let parsed: yaml_serde::Value =
            yaml_serde::from_str(&resource_list(quoted, Some(config)).unwrap()).unwrap();
        assert_eq!(parsed["functionConfig"]["data"]["namespace"], "prod");
        let flow = "{apiVersion: config.kubernetes.io/v1, kind: ResourceList, items: []}\n";
        let parsed: yaml_serde::Value =
            yaml_serde::from_str(&resource_list(flow.to_owned(), Some(config)).unwrap()).unwrap();
        assert_eq!(parsed["functionConfig"]["data"]["namespace"], "prod");
    }

    #[test]
    fn rejects_non_krm_and_broken_yaml() {
        assert!(
            resource_list("a: [".to_owned(), None)
                .unwrap_err()
                .to_string()
                .contains("not valid YAML")
        );
        assert!(
            resource_list("- 1\n".to_owned(), None)
                .unwrap_err()
                .to_string()
                .contains("not a YAML mapping")
        );
        assert!(
            resource_list("a: 1\n".to_owned(), None)
                .unwrap_err()
                .to_string()
                .contains("no apiVersion")
        );
        assert!(
            resource_list("apiVersion: v1\nkind: A\nkind: B\n".to_owned(), None)
                .unwrap_err()
                .to_string()
                .contains("not valid YAML")
        );
    }
}
