# Pipeline image for Vertex AI Pipelines: every component (and the TPU training job)
# runs this image. Build from the repository root:
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/cifar10-pipeline:TAG .
FROM gcr.io/tfx-oss-public/tfx:1.16.0

# TensorFlow on a Cloud TPU VM needs the TPU build of TF 2.16 and its libtpu.
# Set TPU_PACKAGES="" to build a CPU/GPU-only image.
ARG TPU_PACKAGES="tensorflow-tpu==2.16.1"
ARG TPU_FIND_LINKS="https://storage.googleapis.com/libtpu-tf-releases/index.html"

WORKDIR /pipeline
COPY pyproject.toml README.md requirements.lock ./
COPY pipeline ./pipeline
COPY components ./components
COPY data ./data

# The base image already carries TFX 1.16 and its dependency set; add what this
# project needs on top without re-resolving TFX, then the project itself (editable,
# so data/schema/schema.pbtxt stays at /pipeline/data where the compiled pipeline
# expects it).
RUN python -m pip install --no-cache-dir "tf-keras==2.16.0" pillow matplotlib \
    && if [ -n "$TPU_PACKAGES" ]; then \
         python -m pip install --no-cache-dir $TPU_PACKAGES -f "$TPU_FIND_LINKS"; \
       fi \
    && python -m pip install --no-cache-dir --no-deps -e .

ENV TF_USE_LEGACY_KERAS=1
# TPU VMs: TensorFlow finds the local TPU through libtpu; the trainer uses --tpu local.
ENV TPU_MIN_LOG_LEVEL=0
