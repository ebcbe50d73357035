//! Fuzz target for request bodies (see `hasten_model::fuzz`): any bytes
//! parsed as a chat or completions request and, when they parse, planned
//! (validation, chat template, tokenization) give a plan or an error,
//! never a panic and never an internal error.

use crate::common;

use common::*;
use hasten_model::fuzz;
use hasten_protocol::chat::ChatCompletionRequest;
use hasten_protocol::completions::CompletionRequest;
use hasten_server::params::{self, ServerLimits};
use hasten_server::Error;

#[test]
fn request_bodies() {
    let b = backend(engine_config());
    let lim = b.engine.limits();
    let sl = ServerLimits {
        max_prompt_tokens: None,
        max_output_tokens: None,
    };
    let no_internal = |r: Result<params::Plan, Error>| {
        if let Err(e) = r {
            assert!(!matches!(e, Error::Internal(_)), "{e}");
        }
    };
    let seeds = fuzz::corpus("request-json");
    fuzz::run("request-json", &seeds, fuzz::iterations(2000), |bytes| {
        if let Ok(r) = serde_json::from_slice::<ChatCompletionRequest>(bytes) {
            no_internal(params::plan_chat(&r, &b.template, &b.tokenizer, &lim, &sl));
        }
        if let Ok(r) = serde_json::from_slice::<CompletionRequest>(bytes) {
            no_internal(params::plan_completion(&r, &b.tokenizer, &lim, &sl));
        }
    });
}
