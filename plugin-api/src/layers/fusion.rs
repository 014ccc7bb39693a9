//! The [`crate::Fusion`]s a family asks the host for: projections stacked
//! into one matmul at load.

/// The [`crate::Fusion`] that stacks `{prefix}.{q,k,v}_proj` into `{prefix}.qkv_proj`.
pub fn qkv_fusion(prefix: &str) -> crate::Fusion {
    fusion(&format!("{prefix}.qkv_proj"), &["q_proj", "k_proj", "v_proj"].map(|p| format!("{prefix}.{p}")))
}

/// The [`crate::Fusion`] that stacks `{prefix}.{gate,up}_proj` into `{prefix}.gate_up_proj`.
pub fn gate_up_fusion(prefix: &str) -> crate::Fusion {
    fusion(&format!("{prefix}.gate_up_proj"), &["gate_proj", "up_proj"].map(|p| format!("{prefix}.{p}")))
}

/// q/k/v and gate/up fusions of every `model.layers.{i}` of a plain decoder
/// (one cache slot per layer), as llama and qwen3 name them.
pub fn decoder_fusions(plan: &crate::ModelPlan) -> Vec<crate::Fusion> {
    (0..plan.caches.len())
        .flat_map(|i| {
            let p = format!("model.layers.{i}");
            [qkv_fusion(&format!("{p}.self_attn")), gate_up_fusion(&format!("{p}.mlp"))]
        })
        .collect()
}

fn fusion(into: &str, parts: &[String]) -> crate::Fusion {
    crate::Fusion { into: into.into(), parts: parts.iter().map(|p| p.as_str().into()).collect() }
}
