//! `krm-runner plugins --config-schema NAME`: a plugin's `config:` keys, read from the JSON
//! schema of its config type, with an example instance to start from.

use std::fmt::Write;

use krm_plugin_loader::{LayoutChecks, PluginLibrary};
use serde_json::{Map, Value};

use crate::config::Config;
use crate::runtime::{locate_plugin, search_dirs};

/// Nested config types deeper than this are shown as their type name only.
const MAX_DEPTH: usize = 6;

/// The description of `name`: a configured instance's plugin, else a plugin in `plugin_dirs`
/// (or a library path).
pub fn describe(config: &Config, name: &str) -> Result<String, String> {
    let plugin = config
        .evaluators
        .get(name)
        .map_or(name, |instance| instance.plugin.as_str());
    let path = locate_plugin(plugin, &search_dirs(config))
        .map_err(|problem| format!("--config-schema {name}: {problem}"))?;
    let library = PluginLibrary::load(&path, &LayoutChecks::in_user_cache())
        .map_err(|error| format!("--config-schema {name}: {error}"))?;
    let info = library.info();
    let schema = library.config_schema().ok_or_else(|| {
        format!(
            "--config-schema {name}: plugin {} {} does not describe its configuration (built \
             against krm-plugin-api {}; rebuild it against this runner's)",
            info.name, info.version, info.plugin_api_version
        )
    })?;
    let keys = Keys::new(&schema);
    let mut text = format!(
        "plugin {} {} ({})\n{}\n\nconfig keys:\n",
        info.name,
        info.version,
        path.display(),
        info.description
    );
    let mut rows = Vec::new();
    keys.collect(&schema, "", 0, &mut rows);
    let width = rows.iter().map(|row| row.key.len()).max().unwrap_or(0);
    let type_width = rows.iter().map(|row| row.kind.len()).max().unwrap_or(0);
    for row in &rows {
        let _ = writeln!(
            text,
            "  {:<width$}  {:<type_width$}  {}{}",
            row.key,
            row.kind,
            if row.required { "(required) " } else { "" },
            row.description
        );
    }
    if rows.is_empty() {
        text.push_str("  (none)\n");
    }
    let config = keys.example(&schema, 0);
    let _ = write!(
        text,
        "\nexample:\nevaluators:\n  {name}:\n    plugin: {name}\n    config:",
        name = info.name
    );
    match config.as_object() {
        Some(keys) if !keys.is_empty() => {
            text.push('\n');
            for line in yaml_serde::to_string(&config).unwrap_or_default().lines() {
                let _ = writeln!(text, "      {line}");
            }
        }
        _ => text.push_str(" {}\n"),
    }
    Ok(text)
}

struct Row {
    key: String,
    kind: String,
    required: bool,
    description: String,
}

/// Reads a schemars (JSON Schema 2020-12) document, following `$ref`s into its `$defs`.
struct Keys<'a> {
    definitions: Option<&'a Map<String, Value>>,
}

impl<'a> Keys<'a> {
    fn new(root: &'a Value) -> Self {
        Self {
            definitions: root.get("$defs").and_then(Value::as_object),
        }
    }

    /// `schema` with its `$ref` followed (one level: schemars refers only to `$defs`).
    fn resolve(&self, schema: &'a Value) -> &'a Value {
        schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|reference| reference.strip_prefix("#/$defs/"))
            .and_then(|name| self.definitions?.get(name))
            .unwrap_or(schema)
    }

    fn collect(&self, schema: &'a Value, prefix: &str, depth: usize, rows: &mut Vec<Row>) {
        let schema = self.resolve(schema);
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        let required = required_keys(schema);
        for (name, property) in properties {
            let key = format!("{prefix}{name}");
            let resolved = self.resolve(property);
            rows.push(Row {
                key: key.clone(),
                kind: self.kind(property),
                required: required.contains(&name.as_str()),
                description: description(property)
                    .or_else(|| description(resolved))
                    .unwrap_or_default(),
            });
            if depth < MAX_DEPTH {
                self.collect(resolved, &format!("{key}."), depth + 1, rows);
                if let Some(items) = self.resolve(resolved).get("items") {
                    self.collect(items, &format!("{key}[]."), depth + 1, rows);
                }
            }
        }
    }

    fn kind(&self, schema: &Value) -> String {
        let schema = self.resolve(schema);
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            let names: Vec<String> = values.iter().map(Value::to_string).collect();
            return format!("one of {}", names.join("|"));
        }
        if let Some(choices) = schema.get("oneOf").and_then(Value::as_array) {
            let kinds: Vec<String> = choices.iter().map(|choice| self.kind(choice)).collect();
            return kinds.join("|");
        }
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(kind)) => vec![kind.as_str()],
            Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let types: Vec<String> = types
            .into_iter()
            .filter(|kind| *kind != "null")
            .map(|kind| match (kind, schema.get("items")) {
                ("array", Some(items)) => format!("list of {}", self.kind(items)),
                ("object", _) if schema.get("properties").is_none() => {
                    match schema.get("additionalProperties") {
                        Some(values @ Value::Object(_)) => {
                            format!("map of {}", self.kind(values))
                        }
                        _ => "map".to_owned(),
                    }
                }
                (kind, _) => kind.to_owned(),
            })
            .collect();
        if types.is_empty() {
            "any".to_owned()
        } else {
            types.join("|")
        }
    }

    /// A value the key can take: the schema's own example, else its default, else one of
    /// its type.
    fn example(&self, schema: &'a Value, depth: usize) -> Value {
        if let Some(value) = declared_example(schema) {
            return value.clone();
        }
        let resolved = self.resolve(schema);
        if !std::ptr::eq(resolved, schema) {
            return self.example(resolved, depth);
        }
        if let Some(first) = resolved
            .get("enum")
            .and_then(Value::as_array)
            .and_then(|values| values.first())
        {
            return first.clone();
        }
        if let Some(properties) = resolved.get("properties").and_then(Value::as_object) {
            if depth >= MAX_DEPTH {
                return Value::Object(Map::new());
            }
            // Required keys, and optional ones with something to show.
            let required = required_keys(resolved);
            return Value::Object(
                properties
                    .iter()
                    .filter(|(name, property)| {
                        required.contains(&name.as_str())
                            || declared_example(property).is_some_and(|value| !value.is_null())
                    })
                    .map(|(name, property)| (name.clone(), self.example(property, depth + 1)))
                    .collect(),
            );
        }
        let kind = match resolved.get("type") {
            Some(Value::String(kind)) => kind.as_str(),
            Some(Value::Array(kinds)) => kinds
                .iter()
                .filter_map(Value::as_str)
                .find(|kind| *kind != "null")
                .unwrap_or("null"),
            _ => "null",
        };
        match kind {
            "string" => Value::String(String::new()),
            "integer" | "number" => Value::from(0),
            "boolean" => Value::Bool(false),
            "array" => match resolved.get("items") {
                Some(items) if depth < MAX_DEPTH => {
                    Value::Array(vec![self.example(items, depth + 1)])
                }
                _ => Value::Array(Vec::new()),
            },
            "object" => Value::Object(Map::new()),
            _ => Value::Null,
        }
    }
}

/// The keys an object schema requires.
fn required_keys(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The example or default a schema declares.
fn declared_example(schema: &Value) -> Option<&Value> {
    schema
        .get("examples")
        .and_then(Value::as_array)
        .and_then(|examples| examples.first())
        .or_else(|| schema.get("default"))
}

/// The first paragraph of a key's description, on one line.
fn description(schema: &Value) -> Option<String> {
    let text = schema.get("description")?.as_str()?;
    let paragraph = text.split("\n\n").next().unwrap_or(text);
    Some(paragraph.split_whitespace().collect::<Vec<_>>().join(" "))
}
