/*
 * amp-train.h — GradScaler, optimizers and checkpoints for libampcore.
 *
 * The GradScaler reproduces torch.amp.GradScaler exactly: lazy scale creation, unscale_ with an
 * fp64 reciprocal and a fused non-finite check, per-optimizer stages (READY, UNSCALED, STEPPED)
 * with PyTorch's errors as status codes, step skipping, update with growth/backoff/interval and
 * the isfinite cap, update to an explicit scale, and state save/load. Its state (scale, growth
 * tracker, found_inf) and the optimizers' update counts live in tensors of the context's backend,
 * as PyTorch keeps them on the GPU: on the CUDA backend a step is decided and the scale updated on
 * the device, so a training loop never waits for the GPU unless it reads something back (the
 * getters below and step()'s *skipped do; pass NULL to keep the loop asynchronous). Free the
 * scaler and the optimizers before their context.
 *
 *     amp_scaler_t *sc;
 *     amp_scaler_params sp = amp_scaler_defaults();       // 65536, x2, x0.5, 2000
 *     amp_scaler_new(&sp, &sc);
 *     amp_optim_params op = amp_optim_defaults(AMP_OPTIM_ADAM);
 *     amp_optim_t *opt;
 *     amp_optim_new(ctx, &op, params, n_params, &opt);
 *     for (step...) {
 *         amp_optim_zero_grad(opt);
 *         loss = forward(...);
 *         amp_backward(ctx, amp_scaler_scale(sc, ctx, loss));
 *         amp_scaler_step(sc, opt, NULL);                    // unscale_ + skip on inf/NaN
 *         amp_scaler_update(sc);
 *         amp_ctx_reset(ctx);
 *     }
 */
#ifndef AMP_TRAIN_H
#define AMP_TRAIN_H

#include "amp.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Optimizers (parameters are f32 master weights; torch.optim defaults). The step is torch.optim's
// single-tensor SGD, Adam and AdamW in the order of its tensor ops, with no multiply-add fused and
// addcdiv as PyTorch's CUDA kernel orders it (p + v * (m / d)): it agrees with PyTorch's kernels,
// which fuse some multiply-adds (its CPU kernels on AVX2 and its addcdiv's (v * m) / d), to
// rounding, not bit for bit (a few ulp an element a step). No amsgrad, maximize, param groups.

typedef enum amp_optim_kind { AMP_OPTIM_SGD, AMP_OPTIM_ADAM, AMP_OPTIM_ADAMW } amp_optim_kind;

// Doubles, as torch.optim's Python floats are: the scalars the update derives from them (1 - beta,
// the bias corrections, the step size) are computed in double and rounded to f32 once, as a
// Python float reaches PyTorch's f32 kernels (1 - 0.9 rounds to 0.1f, 1 - 0.9f does not).
typedef struct amp_optim_params {
    amp_optim_kind kind;
    double lr;           // SGD 1e-3, Adam 1e-3, AdamW 1e-3
    double momentum;     // SGD only, default 0
    double dampening;    // SGD only, default 0
    bool nesterov;       // SGD only
    double weight_decay; // SGD/Adam 0 (L2 added to the gradient), AdamW 1e-2 (decoupled)
    double beta1, beta2; // Adam/AdamW 0.9, 0.999
    double eps;          // Adam/AdamW 1e-8
} amp_optim_params;

typedef struct amp_optim amp_optim_t;

amp_optim_params amp_optim_defaults(amp_optim_kind kind);
const char *amp_optim_kind_name(amp_optim_kind kind); // "sgd", "adam", "adamw"
bool amp_optim_kind_parse(const char *s, amp_optim_kind *out);
// params: persistent f32 tensors that require grad (the optimizer keeps the pointers). A NULL ctx,
// p, params or out is AMP_ERR_INVALID_ARGUMENT.
amp_status amp_optim_new(amp_ctx_t *ctx, const amp_optim_params *p, amp_tensor_t *const *params,
                         int n, amp_optim_t **out);
void amp_optim_free(amp_optim_t *opt);
// One update of every parameter that has a gradient (parameters without one are skipped).
void amp_optim_step(amp_optim_t *opt);
void amp_optim_zero_grad(amp_optim_t *opt); // set_to_none
int amp_optim_num_params(const amp_optim_t *opt);
amp_tensor_t *amp_optim_param(const amp_optim_t *opt, int i);
// Completed (not skipped) steps; waits for the device.
int64_t amp_optim_steps(const amp_optim_t *opt);
const amp_optim_params *amp_optim_get_params(const amp_optim_t *opt);
// param_groups[0] = p (an LR schedule, load_state_dict): validated like amp_optim_new (a NULL opt
// or p is AMP_ERR_INVALID_ARGUMENT); the kind cannot change, nor can SGD gain momentum it was
// created without (it has no buffers).
amp_status amp_optim_set_params(amp_optim_t *opt, const amp_optim_params *p);
// Optimizer state (torch's optimizer.state): how many updates parameter i received (Adam's
// state["step"]; 0 = no state yet; waits for the device) and its state tensors, persistent f32
// tensors the optimizer owns: k = 0 momentum_buffer / exp_avg, k = 1 exp_avg_sq; NULL where the
// kind has none.
int64_t amp_optim_param_steps(const amp_optim_t *opt, int i);
amp_tensor_t *amp_optim_state(const amp_optim_t *opt, int i, int k);
// Restores the step counters (checkpoints): steps for amp_optim_steps, param_steps[num_params].
// Counts start at 0: a negative one aborts.
void amp_optim_set_steps(amp_optim_t *opt, int64_t steps, const int64_t *param_steps);

// ---------------------------------------------------------------------------------------------
// GradScaler

typedef struct amp_scaler_params {
    float init_scale;      // 65536
    double growth_factor;  // 2.0, must be > 1
    double backoff_factor; // 0.5, must be < 1
    int growth_interval;   // 2000
    bool enabled;          // false: every call passes through (scale() returns the loss)
} amp_scaler_params;

typedef struct amp_scaler_state { // state_dict()
    float scale;
    double growth_factor;
    double backoff_factor;
    int growth_interval;
    int32_t growth_tracker;
} amp_scaler_state;

typedef struct amp_scaler amp_scaler_t;

amp_scaler_params amp_scaler_defaults(void);
// AMP_ERR_INVALID_ARGUMENT (naming the factor) when enabled and growth <= 1 or backoff >= 1, and
// (naming it) for a NULL p or out.
amp_status amp_scaler_new(const amp_scaler_params *p, amp_scaler_t **out);
void amp_scaler_free(amp_scaler_t *sc);
bool amp_scaler_is_enabled(const amp_scaler_t *sc);

// loss * scale (creates the scale, in ctx, on first use; later calls must pass the same ctx);
// the loss itself when disabled.
amp_tensor_t *amp_scaler_scale(amp_scaler_t *sc, amp_ctx_t *ctx, amp_tensor_t *loss);
// The four below: a NULL sc (or opt, where one is taken) is AMP_ERR_INVALID_ARGUMENT (the message
// names it), enabled or not; the stage errors (AMP_ERR_SCALER_STATE, PyTorch's messages) are for
// calls out of order.

// Unscales the optimizer's gradients in place and records whether any was non-finite.
amp_status amp_scaler_unscale(amp_scaler_t *sc, amp_optim_t *opt);
// unscale_ if not done yet, then the optimizer step unless a gradient was non-finite, decided
// where the gradients are. *skipped (may be NULL) tells which; asking waits for the device.
amp_status amp_scaler_step(amp_scaler_t *sc, amp_optim_t *opt, bool *skipped);
// Backoff on any recorded inf, else growth after growth_interval clean updates.
amp_status amp_scaler_update(amp_scaler_t *sc);
// update(new_scale): sets the scale, leaves the growth tracker alone.
amp_status amp_scaler_update_to(amp_scaler_t *sc, float new_scale);

// The getters and state_dict() read the device (PyTorch's .item()).
float amp_scaler_get_scale(const amp_scaler_t *sc); // 1.0 when disabled, init_scale before scale()
int32_t amp_scaler_growth_tracker(const amp_scaler_t *sc);
// Summed found_inf of the last update() (0 clean, >= 1 overflow); -1 (not valid) before the
// first update() and after update_to(), which consumes no inf checks.
float amp_scaler_last_found_inf(const amp_scaler_t *sc);
// AMP_ERR_UNSUPPORTED when disabled (PyTorch returns {}). Both: AMP_ERR_INVALID_ARGUMENT for a
// NULL sc, out or st.
amp_status amp_scaler_state_dict(const amp_scaler_t *sc, amp_scaler_state *out);
amp_status amp_scaler_load_state_dict(amp_scaler_t *sc, const amp_scaler_state *st);

// The exact arithmetic of PyTorch's kernels, usable on their own.
// _amp_update_scale_: found_inf is the summed found_inf tensor value.
void amp_scale_update(float *scale, int32_t *growth_tracker, float found_inf, double growth_factor,
                      double backoff_factor, int growth_interval);
// float32(1.0 / double(scale))
float amp_inv_scale(float scale);

// ---------------------------------------------------------------------------------------------
// Checkpoints: parameters (matched by name, then shape), optimizer state and scaler state in one
// file (format in libampcore/src/checkpoint.c). opt and sc may be NULL. With an optimizer, a save
// also keeps its context's random state (amp_ctx_rng_state) and a load restores it, so dropout
// after a resume draws the masks the uninterrupted run would have (a file saved by a build older
// than this loads and leaves the context's state alone). Loading a truncated,
// corrupted or mismatched file returns AMP_ERR_CORRUPT / AMP_ERR_MISMATCH and changes nothing; a
// NULL path, NULL params with n > 0, a non-contiguous view among params, or a NULL enabled,
// AMP_ERR_INVALID_ARGUMENT. A save is atomic: it writes a file beside path and renames it over
// path, so a crash leaves the old checkpoint whole (and the partial path.PID.N.tmp beside it, to
// delete); the directory must take a new file, an existing path must be writable (its permission
// bits are kept, not its owner).

amp_status amp_checkpoint_save(const char *path, amp_tensor_t *const *params, int n,
                               const amp_optim_t *opt, const amp_scaler_t *sc);
amp_status amp_checkpoint_load(const char *path, amp_tensor_t *const *params, int n,
                               amp_optim_t *opt, amp_scaler_t *sc);
// Whether amp_checkpoint_save could write path, found out before the training it would save: a
// file is made and removed beside it (a save writes there first and renames it over path, or over
// the file a symbolic link at path names). AMP_ERR_IO (amp_last_error names path and why) for a
// directory, a device, a pipe, a link to nothing, an unwritable file or directory.
amp_status amp_checkpoint_writable(const char *path);
// Whether the checkpoint at path holds an enabled GradScaler's state (*enabled; an fp16 run's:
// PyTorch's practice leaves the scaler disabled in fp32 and bf16), without loading anything; a
// disabled GradScaler's load ignores that state, as PyTorch's does. AMP_ERR_CORRUPT as
// amp_checkpoint_load; a file without a scaler record gives false.
amp_status amp_checkpoint_scaler_enabled(const char *path, bool *enabled);
// The number the saved run's next step had (*step; amp_ctx_step_index of the optimizer's context
// at the save, the steps the GradScaler skipped counted, which amp_optim_steps leaves out), for
// amp_ctx_set_step_index after amp_checkpoint_load; -1 for a file saved without an optimizer or
// by a build older than this field. AMP_ERR_CORRUPT as amp_checkpoint_load.
amp_status amp_checkpoint_next_step(const char *path, int64_t *step);

#ifdef __cplusplus
}
#endif
#endif // AMP_TRAIN_H
