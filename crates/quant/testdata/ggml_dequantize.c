// Dequantizes whole Q1_0 blocks with ggml's reference (the type traits' to_float, i.e.
// dequantize_row_q1_0 in ggml/src/ggml-quants.c): q1_0.blocks -> q1_0.f32.
#include <stdio.h>
#include <stdlib.h>
#include "ggml.h"
int main(void) {
    FILE *f = fopen("q1_0.blocks", "rb");
    static unsigned char in[1 << 16];
    size_t n = fread(in, 1, sizeof in, f);
    fclose(f);
    const struct ggml_type_traits *t = ggml_get_type_traits(GGML_TYPE_Q1_0);
    if (n % t->type_size) return 1;
    int64_t k = (int64_t)(n / t->type_size) * t->blck_size;
    float *y = malloc(sizeof(float) * k);
    t->to_float(in, y, k);
    f = fopen("q1_0.f32", "wb");
    fwrite(y, sizeof(float), k, f);
    fclose(f);
    printf("%s: %zu bytes -> %lld values\n", t->type_name, n, (long long)k);
    return 0;
}
