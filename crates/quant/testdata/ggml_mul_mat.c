// Makes the llama.cpp product fixtures of testdata/README.md: TYPE weights of ROWS x COLS
// (random values in [-0.05, 0.05) by ggml's reference quantizer, from_float_ref), N random
// f32 columns, and ggml's CPU mul_mat of them with the weights in the CPU backend's first
// "extra" buffer type (CPU_REPACK: re-laid at upload, as llama.cpp loads a model) when
// REPACK is 1. Writes OUT (weights), OUT.x (columns), OUT.y (products, column-major).
// Build: cc -O2 -I ggml/include ggml_mul_mat.c -L build/bin -lggml-base -lggml-cpu -lggml
// usage: ggml_mul_mat TYPE ROWS COLS N REPACK THREADS OUT
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
int main(int argc, char **argv) {
    if (argc < 8) return 2;
    int type = atoi(argv[1]), rows = atoi(argv[2]), cols = atoi(argv[3]), n = atoi(argv[4]);
    int repack = atoi(argv[5]), threads = atoi(argv[6]);
    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(be, threads);
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    typedef ggml_backend_buffer_type_t *(*extra_t)(ggml_backend_dev_t);
    extra_t extra = (extra_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    ggml_backend_buffer_type_t bt = repack ? extra(dev)[0] : ggml_backend_cpu_buffer_type();
    struct ggml_context *cw = ggml_init((struct ggml_init_params){ ggml_tensor_overhead() * 8, NULL, true });
    struct ggml_context *cx = ggml_init((struct ggml_init_params){ ggml_tensor_overhead() * 8 + ggml_graph_overhead(), NULL, true });
    struct ggml_tensor *W = ggml_new_tensor_2d(cw, type, cols, rows);
    ggml_backend_alloc_ctx_tensors_from_buft(cw, bt);
    const struct ggml_type_traits *t = ggml_get_type_traits(type);
    size_t rb = cols / t->blck_size * t->type_size;
    unsigned char *w = malloc(rb * rows);
    float *wf = malloc(sizeof(float) * cols), *xs = malloc(sizeof(float) * cols * n), *ys = malloc(sizeof(float) * rows * n);
    srand(1);
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < cols; i++) wf[i] = (rand() / (float)RAND_MAX - 0.5f) * 0.1f;
        if (type == GGML_TYPE_F32) memcpy(w + r * rb, wf, rb); // F32 has no reference quantizer
        else t->from_float_ref(wf, w + r * rb, cols);
    }
    ggml_backend_tensor_set(W, w, 0, rb * rows);
    struct ggml_tensor *X = ggml_new_tensor_2d(cx, GGML_TYPE_F32, cols, n);
    struct ggml_tensor *Y = ggml_mul_mat(cx, W, X);
    struct ggml_cgraph *g = ggml_new_graph(cx);
    ggml_build_forward_expand(g, Y);
    ggml_backend_alloc_ctx_tensors(cx, be);
    for (int i = 0; i < cols * n; i++) xs[i] = rand() / (float)RAND_MAX - 0.5f;
    ggml_backend_tensor_set(X, xs, 0, sizeof(float) * cols * n);
    ggml_backend_graph_compute(be, g);
    ggml_backend_tensor_get(Y, ys, 0, sizeof(float) * rows * n);
    char p[512];
    FILE *f = fopen(argv[7], "wb"); fwrite(w, 1, rb * rows, f); fclose(f);
    snprintf(p, sizeof p, "%s.x", argv[7]); f = fopen(p, "wb"); fwrite(xs, sizeof(float), cols * n, f); fclose(f);
    snprintf(p, sizeof p, "%s.y", argv[7]); f = fopen(p, "wb"); fwrite(ys, sizeof(float), rows * n, f); fclose(f);
    return 0;
}
