//! `krm-runner plugins`: the evaluator instances, their plugins and their place in the served
//! chain; with `--config-schema NAME`, a plugin's `config:` keys.

mod schema;

use super::{Exit, configure, print_columns, report};
use crate::cli::Flags;
use crate::runtime::{Purpose, Runtime};

pub fn run(flags: &Flags, config_schema: Option<&str>) -> Exit {
    let configured = configure(flags)?;
    // The schema is read from the plugin's file, whatever else the configuration says.
    if let Some(plugin) = config_schema {
        return match schema::describe(&configured.config, plugin) {
            Ok(text) => {
                print!("{text}");
                Ok(0)
            }
            Err(problem) => Err(report(&[problem])),
        };
    }
    let runtime = configured.start_runtime(Purpose::Serve, Runtime::start)?;
    print_plugins(&runtime);
    Ok(0)
}

fn print_plugins(runtime: &Runtime) {
    let header = [
        "INSTANCE",
        "CHAIN",
        "PLUGIN",
        "VERSION",
        "ABI",
        "DELEGATES TO",
        "FILE",
    ];
    let mut rows = vec![header.map(str::to_owned)];
    for instance in runtime.instances() {
        let position = match (instance.disabled, instance.position) {
            (true, _) => "off".to_owned(),
            (false, Some(position)) => position.to_string(),
            (false, None) => "-".to_owned(),
        };
        let file = instance
            .plugin_file
            .as_ref()
            .map_or_else(|| "(disabled)".to_owned(), |p| p.display().to_string());
        rows.push([
            instance.name.clone(),
            position,
            instance.plugin_name.clone(),
            instance.plugin_version.clone(),
            instance.abi_version.to_string(),
            instance.delegates.join(","),
            file,
        ]);
    }
    print_columns(&rows, " ");
    let mut described = std::collections::BTreeMap::new();
    for instance in runtime.instances().iter().filter(|i| !i.disabled) {
        described.insert(&instance.plugin_name, &instance.description);
    }
    println!();
    for (plugin, description) in described {
        println!("{plugin}: {description}");
    }
}
