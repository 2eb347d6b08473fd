/* Rotary-embedding inverse frequencies for the rope types of tb_hf_rope (default, linear, llama3, yarn),
 * computed in f32 in the same order of operations as transformers' modeling_rope_utils so that the
 * angles match its cos/sin tables bit for bit in the common cases. */
#include <math.h>

#include "llm/llm_internal.h"

static double yarn_correction_dim(double rotations, double dim, double base, double max_positions) {
    return dim * log(max_positions / (rotations * 2.0 * M_PI)) / (2.0 * log(base));
}

static double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0; }

tb_status tb_llm_rope_init(const tb_hf_config *config, float *inv_freq, float *attention_factor) {
    const tb_hf_rope *rope = &config->rope;
    const int64_t dim = config->head_dim, half = dim / 2;
    const float base = (float)rope->theta;
    if (dim % 2 != 0)
        return tb_error_set(TB_ERR_FORMAT, "llm: head_dim %lld is odd; rotary embeddings need an even one", (long long)dim);
    *attention_factor = 1.0f;
    /* default: 1 / base ** (arange(0, dim, 2) / dim) */
    for (int64_t i = 0; i < half; i++)
        inv_freq[i] = 1.0f / powf(base, (float)(2 * i) / (float)dim);
    switch (rope->type) {
    case TB_HF_ROPE_DEFAULT:
        return TB_OK;
    case TB_HF_ROPE_LINEAR:
        for (int64_t i = 0; i < half; i++)
            inv_freq[i] /= (float)rope->factor;
        return TB_OK;
    case TB_HF_ROPE_LLAMA3: {
        const double old_context = (double)rope->original_max_position_embeddings;
        const float factor = (float)rope->factor, low = (float)rope->low_freq_factor;
        const float low_wavelen = (float)(old_context / rope->low_freq_factor);
        const float high_wavelen = (float)(old_context / rope->high_freq_factor);
        const float band = (float)(rope->high_freq_factor - rope->low_freq_factor);
        if (!(rope->high_freq_factor != rope->low_freq_factor) || !(factor > 0.0f))
            return tb_error_set(TB_ERR_FORMAT, "llm: llama3 rope_scaling needs factor > 0 and distinct low/high_freq_factor");
        for (int64_t i = 0; i < half; i++) {
            const float wavelen = (float)(2.0 * M_PI) / inv_freq[i];
            float scaled = wavelen > low_wavelen ? inv_freq[i] / factor : inv_freq[i];
            const float smooth = ((float)old_context / wavelen - low) / band;
            const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
            const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
            inv_freq[i] = medium ? smoothed : scaled;
        }
        return TB_OK;
    }
    case TB_HF_ROPE_YARN: {
        const double original = (double)rope->original_max_position_embeddings;
        double factor = rope->factor;
        if (!(factor > 0.0))
            factor = (double)config->max_position_embeddings / original;
        if (rope->attention_factor > 0.0)
            *attention_factor = (float)rope->attention_factor;
        else if (rope->mscale != 0.0 && rope->mscale_all_dim != 0.0)
            *attention_factor = (float)(yarn_mscale(factor, rope->mscale) / yarn_mscale(factor, rope->mscale_all_dim));
        else
            *attention_factor = (float)yarn_mscale(factor, 1.0);
        const double beta_fast = rope->beta_fast > 0.0 ? rope->beta_fast : 32.0;
        const double beta_slow = rope->beta_slow > 0.0 ? rope->beta_slow : 1.0;
        /* correction range with truncation (transformers' default) */
        double low = floor(yarn_correction_dim(beta_fast, (double)dim, rope->theta, original));
        double high = ceil(yarn_correction_dim(beta_slow, (double)dim, rope->theta, original));
        low = low > 0.0 ? low : 0.0;
        high = high < (double)(dim - 1) ? high : (double)(dim - 1);
        if (low == high)
            high += 0.001;
        for (int64_t i = 0; i < half; i++) {
            const float pos_freq = powf(base, (float)(2 * i) / (float)dim);
            const float extrapolation = 1.0f / pos_freq;
            const float interpolation = 1.0f / ((float)factor * pos_freq);
            float ramp = ((float)i - (float)low) / (float)(high - low);
            ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
            const float extrapolation_factor = 1.0f - ramp;
            inv_freq[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
        }
        return TB_OK;
    }
    default:
        return tb_error_set(TB_ERR_UNSUPPORTED, "llm: rope type %d is not supported", (int)rope->type);
    }
}
