"""The tensors of a Hugging Face Llama-family checkpoint: name -> shape (rows first), from
its config.json; Qwen2's QKV biases and Qwen3's QK-norms where the architecture has them."""


def hf_shapes(cfg):
    dim, heads, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or dim // heads
    ffn, vocab = cfg["intermediate_size"], cfg["vocab_size"]
    arch = cfg["architectures"][0]
    t = {"model.embed_tokens.weight": (vocab, dim), "model.norm.weight": (dim,)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        t.update({p + "input_layernorm.weight": (dim,), p + "post_attention_layernorm.weight": (dim,),
                  p + "self_attn.q_proj.weight": (heads * hd, dim),
                  p + "self_attn.k_proj.weight": (kv * hd, dim),
                  p + "self_attn.v_proj.weight": (kv * hd, dim),
                  p + "self_attn.o_proj.weight": (dim, heads * hd),
                  p + "mlp.gate_proj.weight": (ffn, dim), p + "mlp.up_proj.weight": (ffn, dim),
                  p + "mlp.down_proj.weight": (dim, ffn)})
        if arch == "Qwen2ForCausalLM":
            t.update({p + "self_attn.q_proj.bias": (heads * hd,),
                      p + "self_attn.k_proj.bias": (kv * hd,), p + "self_attn.v_proj.bias": (kv * hd,)})
        if arch == "Qwen3ForCausalLM":
            t.update({p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})
    return t
