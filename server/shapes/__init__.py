"""Values that the store keeps and other packages share, kept apart so the store need not
import the job engine or the marketplace: nothing here imports anything else of ours."""
