// llama_dump: evaluate a token sequence with libllama (CPU) and dump all logits as JSON (a tool
// for comparing dspark with llama.cpp; build with bench/llama_dump.sh).
//
//   llama_dump MODEL.gguf (--tokens 5,17,300 | --prompt TEXT) [--threads N] [--ctk f16|f32|bf16|q8_0]
//               [--fa on|off|auto] [--batch 0|1] [--chunks 3,2,...] [--ubatch N] [--n-ctx N]
//               [--greedy N] [--gen-top K] [--no-logits] [--stop-eog] [--gen-text FILE] [--mmap] [--no-repack]
//               [--dump DIR [--dump-at K]] [--verbose] --out OUT.json
//
// Output: {"model":..., "tokens":[...], "n_vocab":V, "type_k":"f16", "flash_attn":true,
//          "logits":[[V floats] per prompt position], "argmax":[...], "generated":[...],
//          "gen_top":[[[id, logit] x K] per generated token]}
// --gen-top K keeps the K largest logits of every greedy step; --no-logits leaves out
// "logits" (the prompt's full rows) and asks libllama for the last prompt row only, as
// llama-completion does ("argmax" then holds that one row's).
#include "llama.h"
#include "ggml.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static std::string g_dump_dir;     // --dump: where the first decode's F32 tensors go
static bool        g_dump_on = false;
static int         g_dump_at = 0;     // --dump-at: which llama_decode call to dump (0: the first)
static int         g_decodes = 0;     // llama_decode calls so far
static FILE *      g_dump_index = nullptr;

// --dump: every contiguous F32 (and F16) node of the first decode (--dump-at K: of the
// K-th llama_decode call, counting prompt chunks and greedy steps from 0), written as raw f32 to
// DIR/<seq>_<name>.f32 (seq: the order they were computed in) with a line
// "name ne0 ne1 ne2 ne3 src=SRC0,SRC1,... op" in DIR/index.txt.
static bool dump_cb(struct ggml_tensor * t, bool ask, void * /*ud*/) {
    if (!g_dump_on) { return false; }
    if (ask) { return t->type == GGML_TYPE_F32 && ggml_is_contiguous(t); }
    if (t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) { return true; }
    std::vector<float> buf(ggml_nelements(t));
    ggml_backend_tensor_get(t, buf.data(), 0, buf.size() * sizeof(float));
    std::string name = t->name;
    for (char & c : name) { if (c == '/' || c == ' ' || c == '(' || c == ')') { c = '_'; } }
    static int seq = 0;
    char prefix[16];
    snprintf(prefix, sizeof prefix, "%04d_", seq++);
    name = prefix + name;
    FILE * f = fopen((g_dump_dir + "/" + name + ".f32").c_str(), "wb");
    if (f) { fwrite(buf.data(), sizeof(float), buf.size(), f); fclose(f); }
    // The operation's inputs by name (weights keep theirs, e.g. blk.3.attn_k_b.weight):
    // "src=a,b" before the op, so readers taking the first and last fields still work.
    std::string srcs;
    for (int i = 0; i < GGML_MAX_SRC && t->src[i]; i++) {
        std::string s = t->src[i]->name;
        for (char & c : s) { if (c == ' ' || c == ',') { c = '_'; } }
        srcs += (i ? "," : "") + (s.empty() ? std::string("?") : s);
    }
    fprintf(g_dump_index, "%s %lld %lld %lld %lld src=%s %s\n", name.c_str(), (long long) t->ne[0],
            (long long) t->ne[1], (long long) t->ne[2], (long long) t->ne[3], srcs.c_str(), ggml_op_desc(t));
    return true;
}

static std::string g_log;          // everything libllama logged (used to find the resolved FA / K type)
static bool        g_verbose = false;

static void log_cb(ggml_log_level level, const char * text, void * /*ud*/) {
    g_log += text;
    if (g_verbose || level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) {
        fputs(text, stderr);
    }
}

static void usage(const char * argv0) {
    fprintf(stderr,
        "usage: %s MODEL.gguf (--tokens 5,17,300 | --prompt TEXT) --out OUT.json\n"
        "       [--threads N=2] [--ctk f16|f32|bf16|q8_0 (default f16; V type is set equal, MLA requires it)]\n"
        "       [--fa on|off|auto (default auto)] [--batch 0|1 (1 = token by token)] [--chunks 3,2,...]\n"
        "       [--ubatch N (default = n_batch)] [--n-ctx N] [--greedy N] [--gen-top K] [--no-logits] [--stop-eog]\n"
        "       [--gen-text FILE] [--mmap] [--no-repack] [--dump DIR [--dump-at K]] [--verbose]\n",
        argv0);
}

static std::vector<int> parse_int_list(const std::string & s) {
    std::vector<int> out;
    size_t pos = 0;
    while (pos < s.size()) {
        size_t comma = s.find(',', pos);
        if (comma == std::string::npos) comma = s.size();
        std::string item = s.substr(pos, comma - pos);
        if (!item.empty()) out.push_back(std::atoi(item.c_str()));
        pos = comma + 1;
    }
    return out;
}

static int argmax(const float * v, int n) {
    int best = 0;
    for (int i = 1; i < n; ++i) if (v[i] > v[best]) best = i;   // first max wins (same as greedy sampler)
    return best;
}

// the k largest logits, largest first (ties: lower id first, argmax's choice)
static std::vector<std::pair<int, float>> top_k(const float * v, int n, int k) {
    std::vector<int> ids(n);
    for (int i = 0; i < n; ++i) ids[i] = i;
    k = std::min(k, n);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
    std::vector<std::pair<int, float>> out;
    for (int i = 0; i < k; ++i) out.emplace_back(ids[i], v[ids[i]]);
    return out;
}

// parse "<key> = value" style entries from the captured log
static std::string find_after(const std::string & hay, const std::string & needle, size_t from = 0) {
    size_t p = hay.rfind(needle);
    if (p == std::string::npos || p < from) return "";
    p += needle.size();
    size_t e = hay.find_first_of("\n", p);
    return hay.substr(p, e == std::string::npos ? std::string::npos : e - p);
}

int main(int argc, char ** argv) {
    if (argc < 2) { usage(argv[0]); return 1; }
    std::string model_path, out_path, gen_text_path, prompt, ctk = "f16", fa = "auto";
    std::vector<int> tokens, chunks;
    bool have_tokens = false, have_prompt = false, stop_eog = false, use_mmap = false, repack = true;
    int n_threads = 2, batch1 = 0, n_greedy = 0, n_ubatch = 0, n_ctx_arg = 0, gen_top = 0;
    bool no_logits = false;

    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) { fprintf(stderr, "missing value for %s\n", a.c_str()); exit(1); }
            return argv[++i];
        };
        if      (a == "--tokens")  { tokens = parse_int_list(next()); have_tokens = true; }
        else if (a == "--prompt")  { prompt = next(); have_prompt = true; }
        else if (a == "--threads" || a == "-t") { n_threads = std::atoi(next().c_str()); }
        else if (a == "--ctk")     { ctk = next(); }
        else if (a == "--fa")      { fa = next(); }
        else if (a == "--batch")   { batch1 = std::atoi(next().c_str()); }
        else if (a == "--chunks")  { chunks = parse_int_list(next()); }
        else if (a == "--ubatch")  { n_ubatch = std::atoi(next().c_str()); }
        else if (a == "--n-ctx")   { n_ctx_arg = std::atoi(next().c_str()); }
        else if (a == "--greedy")  { n_greedy = std::atoi(next().c_str()); }
        else if (a == "--gen-top") { gen_top = std::atoi(next().c_str()); }
        else if (a == "--no-logits") { no_logits = true; }
        else if (a == "--stop-eog"){ stop_eog = true; }
        else if (a == "--mmap")    { use_mmap = true; }
        else if (a == "--no-repack") { repack = false; }
        else if (a == "--verbose" || a == "-v") { g_verbose = true; }
        else if (a == "--out" || a == "-o") { out_path = next(); }
        else if (a == "--gen-text") { gen_text_path = next(); }
        else if (a == "--dump")    { g_dump_dir = next(); }
        else if (a == "--dump-at") { g_dump_at = atoi(next().c_str()); }
        else if (a == "-h" || a == "--help") { usage(argv[0]); return 0; }
        else if (a[0] != '-' && model_path.empty()) { model_path = a; }
        else { fprintf(stderr, "unknown argument: %s\n", a.c_str()); usage(argv[0]); return 1; }
    }
    if (model_path.empty() || out_path.empty() || (have_tokens == have_prompt)) { usage(argv[0]); return 1; }

    ggml_type type_k;
    if      (ctk == "f16")  type_k = GGML_TYPE_F16;
    else if (ctk == "f32")  type_k = GGML_TYPE_F32;
    else if (ctk == "bf16") type_k = GGML_TYPE_BF16;
    else if (ctk == "q8_0") type_k = GGML_TYPE_Q8_0;
    else { fprintf(stderr, "bad --ctk %s\n", ctk.c_str()); return 1; }

    llama_flash_attn_type fa_type;
    if      (fa == "on")   fa_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    else if (fa == "off")  fa_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    else if (fa == "auto") fa_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
    else { fprintf(stderr, "bad --fa %s\n", fa.c_str()); return 1; }

    llama_log_set(log_cb, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers    = 0;                                   // CPU only
    mp.load_mode       = use_mmap ? LLAMA_LOAD_MODE_MMAP : LLAMA_LOAD_MODE_NONE;  // read into RAM (no mmap)
    mp.lazy_mode       = LLAMA_LAZY_MODE_OFF;
    mp.use_extra_bufts = repack;                              // CPU weight repacking, on by default like llama-completion
    llama_model * model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) { fprintf(stderr, "failed to load model %s\n", model_path.c_str()); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    if (have_prompt) {
        const bool add_special = llama_vocab_get_add_bos(vocab);
        int n = -llama_tokenize(vocab, prompt.c_str(), (int) prompt.size(), nullptr, 0, add_special, true);
        tokens.resize(n);
        if (llama_tokenize(vocab, prompt.c_str(), (int) prompt.size(), tokens.data(), n, add_special, true) < 0) {
            fprintf(stderr, "tokenize failed\n"); return 1;
        }
    }
    if (tokens.empty()) { fprintf(stderr, "no tokens\n"); return 1; }
    if (have_prompt) {
        fprintf(stderr, "llama_dump: prompt tokens:");
        for (int t : tokens) fprintf(stderr, " %d", t);
        fprintf(stderr, "\n");
    }
    for (int t : tokens) if (t < 0 || t >= n_vocab) { fprintf(stderr, "token %d out of range [0,%d)\n", t, n_vocab); return 1; }

    const int n_prompt = (int) tokens.size();
    // evaluation schedule: list of chunk sizes summing to n_prompt
    std::vector<int> sched;
    if (!chunks.empty()) {
        int s = 0;
        for (int c : chunks) { if (c <= 0) { fprintf(stderr, "bad chunk size\n"); return 1; } sched.push_back(c); s += c; }
        if (s != n_prompt) { fprintf(stderr, "--chunks sum %d != n_tokens %d\n", s, n_prompt); return 1; }
    } else if (batch1) {
        sched.assign(n_prompt, 1);
    } else {
        sched.push_back(n_prompt);
    }
    const int max_chunk = *std::max_element(sched.begin(), sched.end());

    llama_context_params cp = llama_context_default_params();
    const int n_need = n_prompt + n_greedy + 8;
    cp.n_ctx           = n_ctx_arg > 0 ? n_ctx_arg : std::max(256, n_need);
    cp.n_batch         = std::max(max_chunk, 32);
    cp.n_ubatch        = n_ubatch > 0 ? n_ubatch : cp.n_batch;
    cp.n_seq_max       = 1;
    cp.n_threads       = n_threads;
    cp.n_threads_batch = n_threads;
    cp.flash_attn_type = fa_type;                 // explicit
    cp.type_k          = type_k;
    cp.type_v          = type_k;                  // MLA (K-only cache) requires type_k == type_v
    cp.no_perf         = true;
    if (!g_dump_dir.empty()) {
        g_dump_index = fopen((g_dump_dir + "/index.txt").c_str(), "w");
        if (!g_dump_index) { fprintf(stderr, "cannot write %s/index.txt\n", g_dump_dir.c_str()); return 1; }
        cp.cb_eval = dump_cb;
    }
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "failed to create context\n"); return 1; }

    // ---- report what the context actually uses (no public getter: parse libllama's own log) ----
    std::string kv_line  = find_after(g_log, "llama_kv_cache: size = ");
    std::string k_type   = "?";
    {
        size_t p = kv_line.find("K (");
        if (p != std::string::npos) { size_t e = kv_line.find(')', p); k_type = kv_line.substr(p + 3, e - p - 3); }
    }
    std::string fa_req = find_after(g_log, "flash_attn            = ");
    bool fa_on;
    if (fa_type == LLAMA_FLASH_ATTN_TYPE_AUTO) {
        // resolve_fused_ops logs "Flash Attention enabled" or "Flash Attention not supported, set to disabled"
        fa_on = g_log.find("Flash Attention enabled") != std::string::npos;
    } else {
        fa_on = fa_type == LLAMA_FLASH_ATTN_TYPE_ENABLED;
    }
    std::string rs_line = find_after(g_log, "llama_memory_recurrent: size = ");
    fprintf(stderr, "llama_dump: n_vocab=%d n_ctx=%u n_batch=%u n_ubatch=%u threads=%d\n",
            n_vocab, llama_n_ctx(ctx), llama_n_batch(ctx), llama_n_ubatch(ctx), n_threads);
    fprintf(stderr, "llama_dump: K cache type = %s (requested %s)%s\n", k_type.c_str(), ctk.c_str(),
            kv_line.empty() ? " [no attention KV cache found in log]" : "");
    fprintf(stderr, "llama_dump: flash_attn requested = %s -> %s\n", fa_req.c_str(), fa_on ? "ON" : "OFF");
    if (!kv_line.empty()) fprintf(stderr, "llama_dump: kv cache: %s\n", kv_line.c_str());
    if (!rs_line.empty()) fprintf(stderr, "llama_dump: recurrent: %s\n", rs_line.c_str());

    // ---- prompt evaluation ----
    std::vector<std::vector<float>> logits;
    logits.reserve(n_prompt);
    llama_batch batch = llama_batch_init(std::max(max_chunk, 1), 0, 1);
    int pos = 0;
    for (int c : sched) {
        batch.n_tokens = c;
        for (int j = 0; j < c; ++j) {
            batch.token[j]     = tokens[pos + j];
            batch.pos[j]       = pos + j;
            batch.n_seq_id[j]  = 1;
            batch.seq_id[j][0] = 0;
            // With --no-logits only the last prompt position's row is asked for, as
            // llama-completion asks: the LM head then multiplies one column (its 1-column
            // kernel), not the whole prompt (kernels for many columns sum differently).
            batch.logits[j]    = (!no_logits || pos + j == n_prompt - 1) ? 1 : 0;
        }
        g_dump_on = g_dump_index && g_decodes == g_dump_at;
        int rc = llama_decode(ctx, batch);
        g_decodes++;
        if (rc != 0) { fprintf(stderr, "llama_decode failed rc=%d at pos %d (chunk %d)\n", rc, pos, c); return 1; }
        if (g_dump_on) { g_dump_on = false; fclose(g_dump_index); g_dump_index = nullptr; }
        for (int j = 0; j < c; ++j) {
            if (!batch.logits[j]) { continue; }
            const float * l = llama_get_logits_ith(ctx, j);
            if (!l) { fprintf(stderr, "no logits for %d\n", j); return 1; }
            logits.emplace_back(l, l + n_vocab);
        }
        pos += c;
    }

    // ---- greedy continuation (pure argmax, one token per decode) ----
    std::vector<int> generated;
    std::vector<std::vector<std::pair<int, float>>> gen_tops;
    if (n_greedy > 0) {
        int next = argmax(logits.back().data(), n_vocab);
        if (gen_top > 0) gen_tops.push_back(top_k(logits.back().data(), n_vocab, gen_top));
        for (int g = 0; g < n_greedy; ++g) {
            if (stop_eog && llama_vocab_is_eog(vocab, next)) break;
            generated.push_back(next);
            if (g + 1 == n_greedy) break;
            batch.n_tokens     = 1;
            batch.token[0]     = next;
            batch.pos[0]       = pos;
            batch.n_seq_id[0]  = 1;
            batch.seq_id[0][0] = 0;
            batch.logits[0]    = 1;
            g_dump_on = g_dump_index && g_decodes == g_dump_at;
            int rc = llama_decode(ctx, batch);
            g_decodes++;
            if (g_dump_on) { g_dump_on = false; fclose(g_dump_index); g_dump_index = nullptr; }
            if (rc != 0) { fprintf(stderr, "llama_decode (greedy) failed rc=%d at pos %d\n", rc, pos); return 1; }
            pos++;
            next = argmax(llama_get_logits_ith(ctx, 0), n_vocab);
            if (gen_top > 0) gen_tops.push_back(top_k(llama_get_logits_ith(ctx, 0), n_vocab, gen_top));
        }
    }
    llama_batch_free(batch);

    // raw bytes of the generated pieces (compare with llama-completion's stdout minus the prompt)
    if (!gen_text_path.empty()) {
        FILE * ft = fopen(gen_text_path.c_str(), "wb");
        if (!ft) { fprintf(stderr, "cannot open %s\n", gen_text_path.c_str()); return 1; }
        for (int t : generated) {
            char buf[256];
            int n = llama_token_to_piece(vocab, t, buf, sizeof(buf), 0, false);   // special tokens not rendered
            if (n > 0) fwrite(buf, 1, n, ft);
        }
        fclose(ft);
    }

    // ---- JSON ----
    FILE * f = fopen(out_path.c_str(), "w");
    if (!f) { fprintf(stderr, "cannot open %s\n", out_path.c_str()); return 1; }
    auto json_str = [&](const std::string & s) {
        fputc('"', f);
        for (char ch : s) { if (ch == '"' || ch == '\\') fputc('\\', f); if ((unsigned char) ch >= 0x20) fputc(ch, f); }
        fputc('"', f);
    };
    fprintf(f, "{\"model\": "); json_str(model_path);
    fprintf(f, ", \"n_vocab\": %d, \"type_k\": ", n_vocab); json_str(k_type);
    fprintf(f, ", \"flash_attn\": %s, \"schedule\": [", fa_on ? "true" : "false");
    for (size_t i = 0; i < sched.size(); ++i) fprintf(f, "%s%d", i ? ", " : "", sched[i]);
    fprintf(f, "], \"tokens\": [");
    for (int i = 0; i < n_prompt; ++i) fprintf(f, "%s%d", i ? ", " : "", tokens[i]);
    fprintf(f, "],\n\"argmax\": [");
    // (with --no-logits only the last position's row exists)
    for (size_t i = 0; i < logits.size(); ++i) fprintf(f, "%s%d", i ? ", " : "", argmax(logits[i].data(), n_vocab));
    fprintf(f, "]");
    if (n_greedy > 0) {
        fprintf(f, ",\n\"generated\": [");
        for (size_t i = 0; i < generated.size(); ++i) fprintf(f, "%s%d", i ? ", " : "", generated[i]);
        fprintf(f, "]");
    }
    if (gen_top > 0) {
        fprintf(f, ",\n\"gen_top\": [");
        for (size_t i = 0; i < generated.size(); ++i) {
            fprintf(f, "%s[", i ? ", " : "");
            for (size_t j = 0; j < gen_tops[i].size(); ++j)
                fprintf(f, "%s[%d, %.9g]", j ? ", " : "", gen_tops[i][j].first, gen_tops[i][j].second);
            fprintf(f, "]");
        }
        fprintf(f, "]");
    }
    if (!no_logits) {
        fprintf(f, ",\n\"logits\": [\n");
        for (int i = 0; i < n_prompt; ++i) {
            fprintf(f, "[");
            for (int v = 0; v < n_vocab; ++v) {
                float x = logits[i][v];
                if (std::isfinite(x)) fprintf(f, "%s%.9g", v ? "," : "", x);
                else fprintf(f, "%s%s", v ? "," : "", std::isnan(x) ? "NaN" : (x > 0 ? "Infinity" : "-Infinity"));
            }
            fprintf(f, "]%s\n", i + 1 < n_prompt ? "," : "");
        }
        fprintf(f, "]");
    }
    fprintf(f, "}\n");
    fclose(f);

    fprintf(stderr, "llama_dump: wrote %d x %d logits to %s", n_prompt, n_vocab, out_path.c_str());
    if (n_greedy > 0) {
        fprintf(stderr, "; generated:");
        for (int t : generated) fprintf(stderr, " %d", t);
    }
    fprintf(stderr, "\n");

    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
