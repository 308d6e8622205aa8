//! `krm-runner functions`: the functions evaluators implement themselves, one's signature, how
//! an image is routed (`--resolve`), or the FunctionConfigs' tags worked out ahead (`--status`).

use std::sync::Arc;

use krm_plugin_api::Answer;
use krm_plugin_loader::HostCallContext;

use super::{BadInvocation, EXIT_CONFIG, Exit, Workers, configure, print_columns, run_async};
use crate::cli::Flags;
use crate::config::Config;
use crate::function_index::FunctionIndex;
use crate::routing;
use crate::runtime::{self, Purpose, Runtime};

pub fn run(
    flags: &Flags,
    name: Option<&str>,
    resolve: Option<&str>,
    tag: Option<&str>,
    status: bool,
) -> Exit {
    let configured = configure(flags)?;
    let runtime = configured.start_runtime(Purpose::Serve, Runtime::start)?;
    let config = &configured.config;
    Ok(run_async(Workers::One, async {
        match (resolve, status) {
            (Some(image), _) => print_resolution(&runtime, config, image, tag).await,
            (None, true) => print_status(&runtime).await,
            (None, false) => print_functions(&runtime, name),
        }
    }))
}

fn print_functions(runtime: &Runtime, name: Option<&str>) -> anyhow::Result<i32> {
    let index = FunctionIndex::new(runtime.functions());
    match name {
        None => print!("{}", index.table()),
        Some(name) => match index.find(name) {
            Some((instance, signature)) => {
                print!("{}", FunctionIndex::describe(instance, signature))
            }
            None => return Err(BadInvocation::error(index.not_found(name))),
        },
    }
    Ok(0)
}

/// `krm-runner functions --resolve IMAGE [--tag CONSTRAINT]`: the trust policy's decision (a
/// refused image ends there, with exit status 1), which FunctionConfig matches,
/// which evaluator would serve, why each executor before it is skipped, and, for a constraint,
/// which version each evaluator would run.
async fn print_resolution(
    runtime: &Runtime,
    config: &Config,
    image: &str,
    tag: Option<&str>,
) -> anyhow::Result<i32> {
    let constraint = match runtime::requested_constraint(image, tag.unwrap_or_default()) {
        Ok(constraint) => constraint,
        Err(error) => {
            eprintln!("krm-runner: {error}");
            return Ok(i32::from(EXIT_CONFIG));
        }
    };
    let router = runtime.store().router();
    let explanation = router.explain(image, constraint.as_ref());
    println!("image:           {image}");
    if let Some(constraint) = &constraint {
        println!("tag constraint:  {constraint}");
    }
    let context = HostCallContext::with_tag(None, tag.unwrap_or_default().to_owned());
    match runtime.admit(&context, image).await {
        Ok(admitted) => {
            println!("policy:          {}", admitted.decision);
            if admitted.image() != image {
                println!("runs:            {}", admitted.image());
            }
        }
        Err(refused) => {
            println!("policy:          {refused}");
            return Ok(1);
        }
    }
    let mut serving = None;
    match &explanation.matched {
        Ok(object) => println!("matched:         {object}"),
        Err(reason) => println!("matched:         none ({reason})"),
    }
    for (executor, outcome) in &explanation.executors {
        let line = match outcome {
            Ok(runs) if serving.is_none() => {
                serving = Some(runs.clone());
                format!("serves: {runs}")
            }
            Ok(runs) => format!("next if declined: {runs}"),
            Err(reason) => format!("skipped: {reason}"),
        };
        println!("{:<16} {line}", format!("{}:", executor.field()));
    }
    if serving.is_none() {
        let chain = runtime.served_chain();
        println!(
            "serves:          the served chain {:?} ({})",
            config.serve,
            chain.join(", ")
        );
    }
    let resolution = runtime.probe(image);
    for reason in &resolution.declined {
        println!("declines:        {reason}");
    }
    let outcome = match &resolution.answer {
        Some(Answer::Serves(instance)) => format!("served by {instance:?}"),
        Some(Answer::MayServe(instance)) => {
            format!("{instance:?} may serve it or decline (it cannot tell before a call)")
        }
        None => format!(
            "NOT_FOUND {}",
            krm_plugin_loader::declined_message(image, &resolution.declined)
        ),
    };
    println!("outcome:         {outcome}");
    let (Some(constraint), Some(tag)) = (&constraint, tag) else {
        return Ok(0);
    };
    // What each evaluator the call would meet would run, in the order it meets them.
    println!("versions:");
    let routed = router
        .plan(image, Some(constraint))
        .steps
        .into_iter()
        .map(|step| {
            let answer = if step.resolved {
                Some(Ok(krm_plugin_api::Resolution {
                    image: step.image.clone(),
                    tag: step.image.rsplit(':').next().unwrap_or_default().to_owned(),
                    digest: None,
                    candidates: Vec::new(),
                }))
            } else {
                step.instance.resolve(image, tag, Some(&step.route))
            };
            (format!("{} (routed)", step.instance.name()), answer)
        });
    let served = runtime.served_chain().into_iter().filter_map(|name| {
        let answer = runtime.instance(name)?.resolve(image, tag, None)?;
        Some((name.to_owned(), Some(answer)))
    });
    for (name, answer) in routed.chain(served) {
        let line = match answer {
            None => "does not resolve constraints for this image".to_owned(),
            Some(Ok(resolution)) if resolution.candidates.is_empty() => {
                format!("runs {}", resolution.reference())
            }
            Some(Ok(resolution)) => format!(
                "runs {} (highest satisfying of [{}])",
                resolution.reference(),
                resolution.candidates.join(", ")
            ),
            Some(Err(error)) => error.message,
        };
        println!("  {name:<22} {line}");
    }
    Ok(0)
}

/// `krm-runner functions --status`: one ahead-of-time round over the FunctionConfig files, as
/// a table; exit 1 when something failed.
async fn print_status(runtime: &Arc<Runtime>) -> anyhow::Result<i32> {
    let router = runtime.store().router().clone();
    let reports = tokio::task::spawn_blocking(move || router.resolve_ahead(None)).await?;
    let rows: Vec<[String; 7]> = reports
        .iter()
        .map(|report| {
            [
                report.image.clone(),
                report.executor.field().to_owned(),
                report.tag.clone().unwrap_or_else(|| "(any)".to_owned()),
                report.resolved.clone().unwrap_or_else(|| "-".to_owned()),
                report.digest.clone().unwrap_or_else(|| "-".to_owned()),
                report.state.label().to_owned(),
                report.state.message().to_owned(),
            ]
        })
        .collect();
    let header = [
        "IMAGE",
        "EXECUTOR",
        "CONSTRAINT",
        "RESOLVED",
        "DIGEST",
        "STATE",
        "LAST ERROR",
    ];
    let rows: Vec<[String; 7]> = std::iter::once(header.map(str::to_owned))
        .chain(rows)
        .collect();
    print_columns(&rows, "  ");
    let failed = reports
        .iter()
        .any(|report| matches!(report.state, routing::State::Failed { .. }));
    Ok(i32::from(failed))
}
