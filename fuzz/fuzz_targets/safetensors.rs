//! A safetensors header (checked against a file as long as the input) and,
//! from the same bytes, a `model.safetensors.index.json`. Must never crash.
#![no_main]

use famlx_formats::safetensors::{check_header, index_shards};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = check_header(data, data.len() as u64);
    let _ = index_shards(data);
});
