//! The catalog functions the builtin runs; the framework they share with the other catalog
//! plugins lives in `krm_catalog_function`.

pub use krm_catalog_function::{
    Ctx, Exit, Function, Halt, Limits, check, group_of, param, validate,
};

mod apply_replacements;
mod apply_setters;
mod ensure_name_substring;
mod fieldspec;
mod nameref;
mod search_replace;
mod set_annotations;
mod set_image;
mod set_labels;
mod set_namespace;

pub const FUNCTIONS: &[&Function] = &[
    &set_namespace::FUNCTION,
    &set_labels::FUNCTION,
    &set_annotations::FUNCTION,
    &set_image::FUNCTION,
    &apply_setters::FUNCTION,
    &search_replace::FUNCTION,
    &ensure_name_substring::FUNCTION,
    &apply_replacements::FUNCTION,
];
