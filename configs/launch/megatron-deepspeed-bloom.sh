#!/bin/bash
# BLOOM-176B's pre-training launch (BigScience tr11-176B-ml) in Megatron-DeepSpeed: 48 nodes of
# 8 A100 80GB, tp 4, pp 12, ZeRO-1 and DeepSpeed's pipeline engine. Data, logging, checkpoint
# and tokenizer arguments trimmed.
srun python -u -m torch.distributed.run --nproc_per_node 8 --nnodes 48 pretrain_gpt.py \
    --tensor-model-parallel-size 4 --pipeline-model-parallel-size 12 \
    --num-layers 70 --hidden-size 14336 --num-attention-heads 112 \
    --seq-length 2048 --max-position-embeddings 2048 \
    --micro-batch-size 2 --global-batch-size 2048 \
    --pad-vocab-size-to 250880 --embed-layernorm --position-embedding-type alibi \
    --pp-partition-method 'type:transformer|embedding' \
    --bf16 --checkpoint-activations \
    --optimizer adam --adam-beta1 0.9 --adam-beta2 0.95 --lr 6e-5 \
    --deepspeed --deepspeed_config ds_config.json --zero-stage 1 --deepspeed-activation-checkpointing
