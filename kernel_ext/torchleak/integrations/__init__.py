"""Callbacks for the training frameworks users already run. Each module imports its framework,
so none is imported by ``import torchleak``:

    from torchleak.integrations.huggingface import TorchleakCallback   # transformers.Trainer
    from torchleak.integrations.lightning import TorchleakCallback     # lightning.pytorch.Trainer
"""
