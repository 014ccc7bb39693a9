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
        family_box(famlx_plugin_apertus::ApertusFamily),
        family_box(famlx_plugin_cohere::CohereFamily),
        family_box(famlx_plugin_cohere::Cohere2Family),
        family_box(famlx_plugin_ernie4_5::Ernie45Family),
        family_box(famlx_plugin_ernie4_5::Ernie45MoeFamily),
        family_box(famlx_plugin_exaone4::Exaone4Family),
        family_box(famlx_plugin_gemma3::gemma2::Gemma2Family),
        family_box(famlx_plugin_gemma3::gemma3_text::Gemma3TextFamily),
        family_box(famlx_plugin_gemma3::gemma3::Gemma3Family),
        family_box(famlx_plugin_glm4::Glm4Family),
        family_box(famlx_plugin_granite::GraniteFamily),
        family_box(famlx_plugin_granite::GraniteMoeFamily),
        family_box(famlx_plugin_helium::HeliumFamily),
        family_box(famlx_plugin_hunyuan::HunyuanV1DenseFamily),
        family_box(famlx_plugin_internlm3::InternLm3Family),
        family_box(famlx_plugin_mistral3::Mistral3Family),
        family_box(famlx_plugin_mistral3::Ministral3Family),
        family_box(famlx_plugin_mistral3::MixtralFamily),
        family_box(famlx_plugin_olmo::Olmo2Family),
        family_box(famlx_plugin_olmo::Olmo3Family),
        family_box(famlx_plugin_olmo::OlmoeFamily),
        family_box(famlx_plugin_phi::PhiFamily),
        family_box(famlx_plugin_phi::PhiMoeFamily),
        family_box(famlx_plugin_seed_oss::SeedOssFamily),
        family_box(famlx_plugin_stablelm::StableLmFamily),
        family_box(famlx_plugin_starcoder2::Starcoder2Family),
        family_box(famlx_plugin_qwen2::Qwen2Family),
        family_box(famlx_plugin_qwen2::Qwen2MoeFamily),
        family_box(famlx_plugin_qwen2::Qwen3MoeFamily),
    ];
    for f in families {
        if let Ok(plan) = f.plan(c.as_str().into()).into_result() {
            // What the host allocates from a plan is bounded by it.
            assert!(plan.caches.len() <= 1024, "{}: {} cache slots", f.name(), plan.caches.len());
            let _ = f.fusions(&plan);
        }
    }
});
