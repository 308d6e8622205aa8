//! The README's lists and figures about the tree stay true: the builtin functions against
//! `krm-runner functions`, the crates in its layout against the workspace, the size the plugin
//! template's README gives for the plugin against the file.

use std::collections::BTreeSet;

use krm_runner_tests::run_cli;

use krm_runner_tests::repo_root as repo;

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).expect("README.md")
}

/// The backquoted words of the README line starting with `lead`, and the lines after it up to
/// the next blank line.
fn listed(readme: &str, lead: &str) -> BTreeSet<String> {
    let start = readme
        .find(&format!("\n{lead}"))
        .unwrap_or_else(|| panic!("README has no line starting {lead:?}"));
    let paragraph = readme[start + 1..].split("\n\n").next().unwrap();
    paragraph
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn builtin_list_matches_the_functions_the_runner_implements() {
    let output = run_cli(&["functions"], &[], b"");
    assert!(output.status.success(), "{output:?}");
    let table = String::from_utf8(output.stdout).unwrap();
    let served_by = |instance: &str| -> BTreeSet<String> {
        table
            .lines()
            .skip(1)
            .filter(|line| line.split_whitespace().nth(1) == Some(instance))
            .map(|line| line.split_whitespace().next().unwrap().to_owned())
            .collect()
    };
    // The confighub plugin serves every typed function (`krm-runner list`) as a KRM function,
    // under `confighub/NAME` where a builtin catalog function has the name.
    let list = run_cli(&["list"], &[], b"");
    assert!(list.status.success(), "{list:?}");
    let typed: Vec<String> = String::from_utf8(list.stdout)
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(typed.len() > 50, "{typed:?}");
    let readme = readme();
    let catalog = listed(&readme, "Functions: ");
    assert_eq!(catalog, served_by("builtin"), "{table}");
    let typed: BTreeSet<String> = typed
        .into_iter()
        .map(|name| {
            if catalog.contains(&name) {
                format!("confighub/{name}")
            } else {
                name
            }
        })
        .collect();
    assert_eq!(typed, served_by("confighub"), "{table}");
    let count = [
        "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve",
    ][catalog.len() - 1];
    assert!(
        readme.contains(&format!("Today\n{count} (a test checks")),
        "the README gives the number of builtins as {count:?}"
    );
}

#[test]
fn layout_names_every_workspace_crate_folder() {
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let members: Vec<&str> = manifest
        .split("members = [")
        .nth(1)
        .unwrap()
        .split(']')
        .next()
        .unwrap()
        .split('"')
        .skip(1)
        .step_by(2)
        .collect();
    let readme = readme();
    let layout = readme
        .split("\n## Layout\n")
        .nth(1)
        .expect("a Layout section")
        .split("\n## ")
        .next()
        .unwrap();
    for member in members {
        let named = [format!("`{member}/`"), format!("`{member}`")]
            .into_iter()
            .chain(
                member
                    .strip_prefix("plugins/")
                    .map(|plugin| format!("`{plugin}`")),
            )
            .any(|mention| layout.contains(&mention));
        assert!(
            named,
            "README Layout does not name the crate folder {member}:\n{layout}"
        );
    }
}

#[test]
fn the_templates_size_is_what_its_readme_says() {
    let lines = std::fs::read_to_string(repo().join("plugin-template/src/lib.rs"))
        .unwrap()
        .lines()
        .count();
    let readme = std::fs::read_to_string(repo().join("plugin-template/README.md")).unwrap();
    let stated: usize = readme
        .split("(`src/lib.rs`, about ")
        .nth(1)
        .expect("the template's README gives its size")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // "About": within a fifth, so that small edits do not need a README change.
    assert!(
        lines.abs_diff(stated) * 5 <= stated,
        "plugin-template/src/lib.rs has {lines} lines; its README says about {stated}"
    );
}
