//! search-replace (not implemented yet).

use krm_plugin_api::Parameter;

use super::{Ctx, Exit, Function};

pub static FUNCTION: Function = Function {
    name: "search-replace",
    description: "search-replace",
    tags: &[],
    parameters,
    changes: &[],
    run,
    legacy_results: false,
};

fn parameters() -> Vec<Parameter> {
    Vec::new()
}

fn run(ctx: &mut Ctx) -> Exit {
    ctx.fail("not implemented")
}
