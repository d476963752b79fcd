# Pipeline images for Vertex AI Pipelines, built from the repository root:
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/cifar10:TAG .                           # CPU
#   docker build --target tpu-trainer -t REGION-docker.pkg.dev/PROJECT/REPO/cifar10-tpu:TAG .  # TPU
#   docker build --target gpu -t REGION-docker.pkg.dev/PROJECT/REPO/cifar10-gpu:TAG .          # GPU
# The CPU image (the last stage, built by default) runs every pipeline step and the Dataflow
# workers; the TPU image runs only the Trainer's CustomJob on a Cloud TPU VM (compile
# --tpu-image). Both install exactly the versions in requirements.lock, as `make` does.
FROM gcr.io/tfx-oss-public/tfx:1.16.0 AS project

WORKDIR /pipeline
COPY requirements.lock ./
# --no-deps: the lock already lists every dependency at its resolved version; nothing is
# re-resolved against the base image's packages.
RUN python -m pip install --no-cache-dir --no-deps -r requirements.lock
COPY pyproject.toml README.md LICENSE ./
COPY pipeline ./pipeline
COPY components ./components
COPY data ./data
# Editable, so data/schema/schema.pbtxt stays at /pipeline/data where the compiled pipeline
# expects it.
RUN python -m pip install --no-cache-dir --no-deps -e .
ENV TF_USE_LEGACY_KERAS=1 TF_ENABLE_ONEDNN_OPTS=1

# The Trainer on a Cloud TPU VM: TensorFlow's TPU VM build and its libtpu, installed as Vertex
# AI's "Training with TPU accelerators" page prescribes for a custom container (the wheel from
# cloud-tpu-tpuvm-artifacts; libtpu.so in /lib). The TPU build replaces the lock's tensorflow
# (both own the tensorflow/ package), same 2.16 line, nothing else changes (--no-deps).
FROM project AS tpu-trainer
ARG TF_TPU_WHEEL=https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/tensorflow/tf-2.16.1/tensorflow-2.16.1-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
ARG LIBTPU_URL=https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/libtpu/1.10.1/libtpu.so
RUN python -m pip uninstall -y tensorflow \
    && python -m pip install --no-cache-dir --no-deps "$TF_TPU_WHEEL" \
    && curl -fsSL "$LIBTPU_URL" -o /lib/libtpu.so
# TPU v5e needs TensorFlow's PJRT runtime; the compiled CustomJob sets its environment
# variables for v5litepod workers only (pipeline/settings/tpu.py), v2/v3 keep the default runtime.

# The CPU image with CUDA's libraries, for training on GPUs (pass it as --image: every step
# runs in it). The lock's TensorFlow is a CUDA build that loads them at run time; these are
# the pins of its `and-cuda` extra (tests/test_dockerfile.py checks them against it).
FROM project AS gpu
RUN python -m pip install --no-cache-dir --no-deps \
    nvidia-cublas-cu12==12.3.4.1 nvidia-cuda-cupti-cu12==12.3.101 \
    nvidia-cuda-nvcc-cu12==12.3.107 nvidia-cuda-nvrtc-cu12==12.3.107 \
    nvidia-cuda-runtime-cu12==12.3.101 nvidia-cudnn-cu12==8.9.7.29 \
    nvidia-cufft-cu12==11.0.12.1 nvidia-curand-cu12==10.3.4.107 \
    nvidia-cusolver-cu12==11.5.4.101 nvidia-cusparse-cu12==12.2.0.103 \
    nvidia-nccl-cu12==2.19.3 nvidia-nvjitlink-cu12==12.3.101

# The default target: the CPU image for every other step and the Dataflow workers.
FROM project AS pipeline
