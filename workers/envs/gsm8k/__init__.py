"""`benchmark=gsm8k`: grade-school math word problems (Cobbe et al., 2021)."""
