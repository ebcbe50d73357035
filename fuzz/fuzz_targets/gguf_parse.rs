//! Fuzzes the GGUF header parser and everything that reads its metadata:
//! any byte string must give a value or an error, never a panic, a hang or
//! a huge allocation.
#![no_main]

use hasten_model::config::Config;
use hasten_model::gguf::GgufHeader;
use hasten_model::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = GgufHeader::parse(data, "fuzz.gguf") {
        let _ = Config::from_gguf(&h, "fuzz.gguf", 32);
        let _ = Tokenizer::from_gguf(&h, "fuzz.gguf");
    }
});
