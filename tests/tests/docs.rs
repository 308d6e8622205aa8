//! The docs' lists and links stay true: the builtin functions (docs/functions.md) against
//! `krm-runner functions`, the crates and their dependencies (ARCHITECTURE.md) against the
//! workspace's `cargo metadata`, the size the plugin template's README gives for the plugin
//! against the file, every page of docs/ linked from the README, and every relative link of the
//! README, ARCHITECTURE.md and docs/ reaching an existing file (and heading).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use krm_runner_tests::run_cli;

use krm_runner_tests::repo_root as repo;

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// The backquoted words of the line starting with `lead`, and the lines after it up to the next
/// blank line.
fn listed(page: &str, lead: &str) -> BTreeSet<String> {
    let start = page
        .find(&format!("\n{lead}"))
        .unwrap_or_else(|| panic!("no line starting {lead:?}"));
    let paragraph = page[start + 1..].split("\n\n").next().unwrap();
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
    let page = read("docs/functions.md");
    let catalog = listed(&page, "Functions: ");
    assert_eq!(catalog, served_by("builtin"), "docs/functions.md\n{table}");
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
        page.contains(&format!("Today\n{count} (a test checks")),
        "docs/functions.md gives the number of builtins as {count:?}"
    );
}

/// Each workspace member's folder, crate name and the workspace crates it depends on
/// (normal dependencies), from `cargo metadata`.
fn workspace_crates() -> BTreeMap<String, (String, BTreeSet<String>)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(repo())
        .output()
        .expect("cargo metadata");
    assert!(output.status.success(), "{output:?}");
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let packages = metadata["packages"].as_array().unwrap();
    let names: BTreeSet<&str> = packages
        .iter()
        .map(|package| package["name"].as_str().unwrap())
        .collect();
    let root = repo();
    packages
        .iter()
        .map(|package| {
            let manifest = Path::new(package["manifest_path"].as_str().unwrap());
            let folder = manifest
                .parent()
                .unwrap()
                .strip_prefix(&root)
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned();
            let depends = package["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|dependency| dependency["kind"].is_null())
                .map(|dependency| dependency["name"].as_str().unwrap())
                .filter(|name| names.contains(name))
                .map(str::to_owned)
                .collect();
            (
                folder,
                (package["name"].as_str().unwrap().to_owned(), depends),
            )
        })
        .collect()
}

#[test]
fn architecture_names_every_crate_and_its_dependencies() {
    let architecture = read("ARCHITECTURE.md");
    // The crates table: `| `folder/` | `crate` | job | `dependency`, ... |`.
    let rows: BTreeMap<String, (String, BTreeSet<String>)> = architecture
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 4, "ARCHITECTURE.md row: {line}");
            let code = |cell: &str| -> Vec<String> {
                cell.split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_owned)
                    .collect()
            };
            let folder = code(cells[0]).concat();
            let name = code(cells[1]).concat();
            let depends = code(cells[3]).into_iter().collect();
            (folder.trim_end_matches('/').to_owned(), (name, depends))
        })
        .collect();
    let crates = workspace_crates();
    assert_eq!(
        rows.keys().collect::<Vec<_>>(),
        crates.keys().collect::<Vec<_>>(),
        "ARCHITECTURE.md's crates table lists the workspace members' folders"
    );
    for (folder, (name, depends)) in &crates {
        let (row_name, row_depends) = &rows[folder];
        assert_eq!(row_name, name, "ARCHITECTURE.md: the crate in {folder}/");
        assert_eq!(
            row_depends, depends,
            "ARCHITECTURE.md: the workspace crates {name} depends on"
        );
    }
}

#[test]
fn the_templates_size_is_what_its_readme_says() {
    let lines = read("plugin-template/src/lib.rs").lines().count();
    let readme = read("plugin-template/README.md");
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

/// The pages of docs/, as paths from the repository's root.
fn doc_pages() -> Vec<String> {
    let mut pages: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    pages.sort();
    pages
}

/// The targets of the Markdown links of `text` outside fenced code blocks.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            targets.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    targets
}

/// GitHub's anchor for a heading: lower case, spaces as dashes, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut fenced = false;
    markdown
        .lines()
        .filter(|line| {
            if line.starts_with("```") {
                fenced = !fenced;
            }
            !fenced && line.starts_with('#')
        })
        .map(|line| anchor(line.trim_start_matches('#')))
        .collect()
}

#[test]
fn the_readme_links_every_page_of_docs() {
    let readme = read("README.md");
    let linked: BTreeSet<String> = link_targets(&readme).into_iter().collect();
    let pages = doc_pages();
    assert!(pages.len() >= 8, "{pages:?}");
    for page in pages {
        assert!(linked.contains(&page), "README.md does not link {page}");
    }
    let lines = readme.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines, more than 250");
}

#[test]
fn relative_links_reach_existing_files_and_headings() {
    let mut pages = vec!["README.md".to_owned(), "ARCHITECTURE.md".to_owned()];
    pages.extend(doc_pages());
    let mut broken = Vec::new();
    for page in &pages {
        let text = read(page);
        let folder = Path::new(page).parent().unwrap().to_owned();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = match target.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (target.as_str(), None),
            };
            let path: PathBuf = if file.is_empty() {
                repo().join(page)
            } else {
                repo().join(&folder).join(file)
            };
            if !path.exists() {
                broken.push(format!("{page}: {target}: no such file"));
                continue;
            }
            if let Some(fragment) = fragment {
                let markdown = std::fs::read_to_string(&path).unwrap_or_default();
                if !anchors(&markdown).contains(fragment) {
                    broken.push(format!("{page}: {target}: no such heading"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
