#!/bin/bash
# GPT-3 175B on 128 nodes of 8 GPUs, written the way Megatron-LM's example scripts are:
# settings in variables, arguments in arrays, expanded on the torchrun line.
# `stepcast import megatron --args-file configs/launch/megatron-gpt3-175b-arrays.sh` expands them
# as the shell would; CHECKPOINT_PATH and DATA_PATH come from the command line and stay as written.

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
NUM_NODES=128
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
TP=${TP:-8}
PP=${PP:-8}

CHECKPOINT_PATH=$1
DATA_PATH=$2

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
)

GPT_MODEL_ARGS=(
    --num-layers 96
    --hidden-size 12288
    --num-attention-heads 96
    --seq-length 2048
    --max-position-embeddings 2048
    --vocab-size 51200   # GPT-2's BPE padded to a multiple of 128 x TP
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 1536
    --bf16
    --lr 6.0e-5
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP
    --pipeline-model-parallel-size $PP
    --num-layers-per-virtual-pipeline-stage 3
)
MODEL_PARALLEL_ARGS+=(--sequence-parallel --use-distributed-optimizer --overlap-grad-reduce)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${GPT_MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    --data-path $DATA_PATH \
    --save $CHECKPOINT_PATH 2>&1 | tee train.log
