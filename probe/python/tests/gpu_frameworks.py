"""gpu_frameworks.py — training frameworks' own loops under `ampprobe run --torch` (run_gpu.sh,
test_gpu_faults.py): the script never names ampprobe, the framework builds the autocast, the
GradScaler and the optimizer, and the fault is planted from the framework's own hooks.

  python3 gpu_frameworks.py --case hf|lightning [--healthy] [--bf16] [--accum N] [--ckpt]

  hf         Hugging Face transformers' Trainer (fp16=True: accelerate's autocast and GradScaler,
             gradient clipping at 1.0, AdamW) on a GPT-2 built from a config (2 blocks, 64 wide,
             a vocabulary of 256, random tokens; nothing downloaded); a TrainerCallback multiplies
             transformer.h.1.mlp.c_fc's weight by 1e6 as step 3 begins (fp16 overflow there);
             --bf16: bf16=True instead, no GradScaler; --accum N: gradient_accumulation_steps;
             --ckpt: gradient_checkpointing=True
  lightning  Lightning's Trainer (precision="16-mixed": its MixedPrecision plugin's autocast and
             GradScaler, the optimizer stepped inside Lightning's closure, zero_grad between the
             forward and backward()) on an MLP whose layers are a LightningModule's `layers`;
             a NaN in an item of step 3's first batch (the loader not shuffled); --bf16:
             "bf16-mixed"; --accum N: accumulate_grad_batches

Each prints "step N loss X" a step.
"""
import argparse
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

FAULT_STEP = 3
STEPS = 8
BATCH = 16


class Tokens(torch.utils.data.Dataset):
    """Random token sequences, each its own labels (a language model's batch)."""

    def __init__(s, n, length=32, vocab=256):
        g = torch.Generator().manual_seed(1)
        s.x = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(s):
        return len(s.x)

    def __getitem__(s, i):
        return {"input_ids": s.x[i], "labels": s.x[i]}


def hf(a):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, \
        TrainingArguments

    class Blowup(TrainerCallback):
        def on_step_begin(s, args, state, control, model=None, **kw):
            if not a.healthy and state.global_step == FAULT_STEP:
                with torch.no_grad():
                    model.transformer.h[1].mlp.c_fc.weight.mul_(1e6)

    class Losses(TrainerCallback):
        def on_log(s, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                print("step %d loss %.6g" % (state.global_step - 1, logs["loss"]), flush=True)

    model = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2,
                                       n_head=4))
    args = TrainingArguments(output_dir=a.out, max_steps=STEPS, per_device_train_batch_size=BATCH,
                             gradient_accumulation_steps=a.accum, gradient_checkpointing=a.ckpt,
                             learning_rate=1e-4, fp16=not a.bf16, bf16=a.bf16, logging_steps=1,
                             save_strategy="no", report_to="none", disable_tqdm=True, seed=0,
                             dataloader_num_workers=0)
    Trainer(model=model, args=args, train_dataset=Tokens(STEPS * BATCH * a.accum),
            callbacks=[Blowup(), Losses()]).train()


def lightning(a):
    import lightning.pytorch as pl

    class Lit(pl.LightningModule):
        def __init__(s, d=64, out=10):
            super().__init__()
            s.layers = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d),
                                     nn.ReLU(), nn.Linear(d, out))

        def forward(s, x):
            return s.layers(x)

        def training_step(s, batch, i):
            x, y = batch
            loss = F.cross_entropy(s(x), y)
            print("step %d loss %.6g" % (s.global_step, loss.item()), flush=True)
            return loss

        def configure_optimizers(s):
            return torch.optim.Adam(s.parameters(), lr=1e-3)

    g = torch.Generator().manual_seed(1)
    n = STEPS * BATCH * a.accum
    x, y = torch.randn(n, 64, generator=g), torch.randint(0, 10, (n,), generator=g)
    if not a.healthy:
        x[FAULT_STEP * a.accum * BATCH + 2, 5] = float("nan")
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH)
    trainer = pl.Trainer(accelerator="gpu", devices=1, max_steps=STEPS,
                         precision="bf16-mixed" if a.bf16 else "16-mixed", logger=False,
                         accumulate_grad_batches=a.accum,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=a.out)
    trainer.fit(Lit(), data)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", required=True, choices=["hf", "lightning"])
    ap.add_argument("--healthy", action="store_true")
    ap.add_argument("--bf16", action="store_true", help="the framework's bf16 mixed precision")
    ap.add_argument("--accum", type=int, default=1, metavar="N",
                    help="gradients accumulated over N batches a step (default 1)")
    ap.add_argument("--ckpt", action="store_true", help="hf: gradient checkpointing")
    ap.add_argument("--out", help="the framework's output folder (default: a new one in /tmp)")
    a = ap.parse_args()
    a.out = a.out or tempfile.mkdtemp(prefix="gpu_frameworks.")
    torch.manual_seed(0)
    (hf if a.case == "hf" else lightning)(a)


if __name__ == "__main__":
    main()
