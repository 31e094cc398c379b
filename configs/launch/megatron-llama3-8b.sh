#!/bin/bash
# Llama 3 8B on 8 nodes
torchrun --nproc_per_node 8 --nnodes 8 pretrain_gpt.py \
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 \
    --group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 \
    --swiglu --normalization RMSNorm --position-embedding-type rope \
    --untie-embeddings-and-output-weights --disable-bias-linear \
    --vocab-size 128256 --seq-length 8192 --max-position-embeddings 8192 \
    --micro-batch-size 1 --global-batch-size 128 \
    --tensor-model-parallel-size 2 --context-parallel-size 2 \
    --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
    --recompute-granularity full --recompute-method block --recompute-num-layers 4 \
    --bf16 --lr 3e-4 --data-path "/data/my text_document" --log-interval 10
