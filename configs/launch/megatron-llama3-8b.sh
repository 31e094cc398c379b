#!/bin/bash
# Llama 3 8B pretraining on 8 nodes
torchrun --nproc_per_node 8 --nnodes 8 pretrain_gpt.py \
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 \
    --group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 \
    --swiglu --normalization RMSNorm --position-embedding-type rope \
    --untie-embeddings-and-output-weights --disable-bias-linear \
    --vocab-size 128256 --seq-length 8192 --max-position-embeddings 8192 \
    --micro-batch-size 1 --global-batch-size 128 \
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --context-parallel-size 2 \
    --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
    --bf16 --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --train-iters 100000 \
    --data-path /data/my_text_document --log-interval 10 --save /ckpt --tokenizer-type HuggingFaceTokenizer
