#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "ggml.h"
#include "ggml-cpu.h"
// Prints ggml's own dot product (the CPU type traits' `vec_dot`, after `from_float` made the
// Q8_K activations) of each fixture row with NCOL activation columns, as f32 bits: the
// expected values of `iq_lattice`'s real-data test (`ggml_dots.txt`). Column c, value i is
// ((i·7919 + c·104729 + 13) mod 2001 − 1000) / 997.
// Build from this folder against a llama.cpp build, e.g.
//   gcc -O2 ggml_dots.c -I$LLAMA/ggml/include -L$BUILD/bin -lggml-cpu -lggml-base -lggml \
//       -Wl,-rpath,$BUILD/bin -o /tmp/ggml_dots && /tmp/ggml_dots > ggml_dots.txt
#define NCOL 3
int main(int argc, char **argv) {
    ggml_cpu_init();
    const char *names[] = {"iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s"};
    enum ggml_type types[] = {GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S, GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ3_S};
    const int cols = 1536, rows = 6;
    for (int t = 0; t < 5; t++) {
        char path[64]; snprintf(path, sizeof path, "%s.bin", names[t]);
        FILE *f = fopen(path, "rb");
        size_t rb = ggml_row_size(types[t], cols);
        uint8_t *w = malloc(rb * rows);
        if (fread(w, 1, rb * rows, f) != rb * rows) return 1;
        fclose(f);
        const struct ggml_type_traits_cpu *tr = ggml_get_type_traits_cpu(types[t]);
        const struct ggml_type_traits_cpu *q8 = ggml_get_type_traits_cpu(tr->vec_dot_type);
        size_t xb = ggml_row_size(tr->vec_dot_type, cols);
        uint8_t *xq = malloc(xb);
        float *x = malloc(sizeof(float) * cols);
        printf("%s", names[t]);
        for (int c = 0; c < NCOL; c++) {
            for (int i = 0; i < cols; i++) x[i] = (float)(((i * 7919 + c * 104729 + 13) % 2001) - 1000) / 997.0f;
            q8->from_float(x, xq, cols);
            for (int r = 0; r < rows; r++) {
                float s;
                tr->vec_dot(cols, &s, 0, w + r * rb, 0, xq, 0, 1);
                uint32_t bits; memcpy(&bits, &s, 4);
                printf(" %08x", bits);
            }
        }
        printf("\n");
    }
    return 0;
}
