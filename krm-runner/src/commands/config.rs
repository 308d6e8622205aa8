//! `krm-runner config`: the merged configuration and where each value came from; `config check`
//! validates it and the FunctionConfig files as start-up does.

use super::{Exit, configure, report};
use krm_runner_function_config::config_file;

use crate::cli::{ConfigAction, Flags};
use crate::config::{self as configuration, Config};
use crate::runtime::{Purpose, Runtime};

pub fn run(flags: &Flags, action: Option<&ConfigAction>) -> Exit {
    let configured = configure(flags)?;
    match action {
        None if !configured.problems.is_empty() => Err(report(&configured.problems)),
        None => {
            print_config(&configured.figment, &configured.config);
            Ok(0)
        }
        Some(ConfigAction::Check) => {
            let runtime = configured.start_runtime(Purpose::Check, Runtime::start)?;
            Ok(report_check(&runtime))
        }
    }
}

/// `krm-runner config check`, once the configuration has passed what start-up checks: the
/// conflicts between FunctionConfigs too, which serving only logs.
fn report_check(runtime: &Runtime) -> u8 {
    let conflicts: Vec<String> = runtime
        .store()
        .conflicts()
        .into_iter()
        .map(|conflict| format!("function_configs.paths: {conflict}"))
        .collect();
    if !conflicts.is_empty() {
        return report(&conflicts);
    }
    println!(
        "configuration OK; {} FunctionConfigs OK",
        runtime.store().file_objects()
    );
    0
}

fn print_config(figment: &figment::Figment, config: &Config) {
    match to_yaml(config) {
        Ok(yaml) => print!("{yaml}"),
        Err(error) => eprintln!("krm-runner: cannot print the configuration: {error}"),
    }
    println!("# where each value came from:");
    for (key, value, source) in configuration::provenance(figment) {
        println!("# {key} = {value}  <- {source}");
    }
}

/// Plugin settings are JSON values, whose numbers (with serde_json's `arbitrary_precision`, which
/// the starlark interpreter turns on) serialize as a private wrapper: YAML gets them as plain
/// numbers by way of a plain value.
fn to_yaml(config: &Config) -> Result<String, yaml_serde::Error> {
    let json =
        serde_json::to_value(config).map_err(<yaml_serde::Error as serde::ser::Error>::custom)?;
    let plain: yaml_serde::Value = config_file::from_json_value(json)?;
    yaml_serde::to_string(&plain)
}
