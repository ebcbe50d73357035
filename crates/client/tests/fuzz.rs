//! Fuzz target for the client's SSE parser and the chunk JSON it carries
//! (see `hasten_model::fuzz`): any byte stream, split anywhere, gives
//! items or errors, never a panic.

use hasten_client::sse::{Item, Parser};
use hasten_model::fuzz;
use hasten_protocol::chat::ChatCompletionChunk;
use tokio::time::Instant;

#[test]
fn sse_streams() {
    let seeds = fuzz::corpus("sse");
    fuzz::run("sse", &seeds, fuzz::iterations(3000), |b| {
        // Fed whole and in uneven pieces: both must parse the same way.
        let mut whole = Vec::new();
        Parser::new().feed(b, Instant::now(), &mut whole);
        let mut parts = Vec::new();
        let mut p = Parser::new();
        for piece in b.chunks(7) {
            p.feed(piece, Instant::now(), &mut parts);
        }
        let data = |items: &[Item]| -> Vec<String> {
            items
                .iter()
                .filter_map(|i| match i {
                    Item::Event { data, .. } => Some(data.clone()),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(data(&whole), data(&parts));
        for d in data(&whole) {
            let _ = serde_json::from_str::<ChatCompletionChunk>(&d);
        }
    });
}
