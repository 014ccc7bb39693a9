//! A config.json through every in-tree family's plan (what the host does
//! before anything is built). Must give a plan or an error, never a crash,
//! a hang or a huge allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plugin_api::adapter::family_box;

fuzz_target!(|data: &[u8]| {
    let Ok(c) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let c = c.to_string();
    let families = [
        family_box(famlx_plugin_llama::LlamaFamily),
        family_box(famlx_plugin_qwen3::Qwen3Family),
        family_box(famlx_plugin_qwen3_5::Qwen3_5Family),
        family_box(famlx_plugin_gemma4::Gemma4Family),
        family_box(famlx_plugin_gemma4_unified::Gemma4UnifiedFamily),
    ];
    for f in families {
        if let Ok(plan) = f.plan(c.as_str().into()).into_result() {
            // What the host allocates from a plan is bounded by it.
            assert!(plan.caches.len() <= 1024, "{}: {} cache slots", f.name(), plan.caches.len());
            let _ = f.fusions(&plan);
        }
    }
});
